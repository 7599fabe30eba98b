"""The progress channel (UDP on loopback) is an input any local process can write to: only reports
signed with the job's key count, every field is bounded, and the senders kept are capped.

A real Monitor listens on a real socket; the hostile datagrams come from another process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from pipeline.beam.progress import MAX_SENDERS, Monitor, Reporter, Totals
from pipeline.core.reports import MAX_COUNT, sign

HOSTILE = [
    b'{"id": "x", "read": 1e999, "done": 1e999, "docs": 1e999, "tokens": 1e999}',  # OverflowError in int()
    b'{"id": "x", "read": 0, "done": 5, "docs": -100, "tokens": -1000000}',  # negative figures
    b'{"id": "y", "read": 10, "done": 10, "docs": 10, "tokens": 10}',  # plausible, but from a stranger
    b'{"id": "z", "read": NaN, "done": Infinity, "docs": 1, "tokens": 1}',
    b"[1, 2, 3]",
    b"\xff" * 2000,
]


def _send_from_another_process(address, datagrams: list[bytes]) -> None:
    script = ("import socket, sys, json\n"
              "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
              "for d in json.load(sys.stdin): s.sendto(bytes.fromhex(d), (sys.argv[1], int(sys.argv[2])))\n")
    subprocess.run([sys.executable, "-c", script, address[0], str(address[1])], check=True, timeout=120,
                   input=json.dumps([d.hex() for d in datagrams]), text=True)


def _wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.slow
def test_hostile_datagrams_neither_stop_the_monitor_nor_show_figures():
    monitor = Monitor(total_bytes=1000, every_s=0.05).start()
    try:
        _send_from_another_process(monitor.address, HOSTILE)
        forged = [sign(b"\0" * 32, "w", {"read": 1, "done": 1, "docs": 1, "tokens": 1})]  # another key
        _send_from_another_process(monitor.address, forged)
        time.sleep(0.5)
        assert monitor.totals() == Totals()  # nothing counted
        worker = Reporter(monitor.address, 1000)
        worker.add(read=400, done=300, docs=7, tokens=99)
        worker.flush()
        _wait_for(lambda: monitor.totals().docs == 7)
        assert monitor.totals() == Totals(read=400, done=300, docs=7, tokens=99)
        assert monitor._thread.is_alive()
        assert all("-" not in line.split("progress:")[1] for line in monitor.lines)
    finally:
        monitor.stop()


def test_every_field_is_bounded():
    monitor = Monitor(total_bytes=1000, every_s=10)
    for counts in ({"read": -1}, {"read": MAX_COUNT + 1}, {"read": 1.5}, {"read": True}, {"read": "5"}):
        monitor.receive(sign(monitor.key, "a", {"read": 0, "done": 0, "docs": 0, "tokens": 0} | counts))
    monitor.receive(sign(monitor.key, "../" * 40, {"read": 1, "done": 1, "docs": 1, "tokens": 1}))
    assert monitor.totals() == Totals()


def test_the_senders_kept_are_capped():
    monitor = Monitor(total_bytes=1000, every_s=10)
    for i in range(MAX_SENDERS + 500):
        monitor.receive(sign(monitor.key, f"s{i}", {"read": 1, "done": 1, "docs": 1, "tokens": 1}))
    assert len(monitor._senders) == MAX_SENDERS
    monitor.receive(sign(monitor.key, "s0", {"read": 2, "done": 1, "docs": 1, "tokens": 1}))  # a known one
    assert monitor.totals().read == MAX_SENDERS + 1
