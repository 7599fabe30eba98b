"""Progress while a job runs: percent of the input, documents/s, tokens/s and an ETA.

The lines are pure functions of the counts; the counts travel from workers to the driver as UDP
datagrams on the loopback interface; and a real multi-process DirectRunner job of more than 20 s
prints at least one line with a percent and an ETA.
"""

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.beam import progress
from pipeline.beam.progress import Monitor, Rates, Reporter, Totals, progress_line
from pipeline.core.reports import sign

REPO = Path(__file__).resolve().parents[1]
LINE_WITH_ETA = re.compile(r"progress: (\d+\.\d)% of [\d.]+ MB input tokenized, [\d,]+ docs/s, [\d,]+ tokens/s, "
                           r"ETA (\d+h)?(\d+m)?\d+s")


def test_lines_say_what_phase_the_job_is_in():
    assert progress_line(Totals(read=50), 200, None) == "progress: reading input, 25.0% of 0.0 MB read"
    assert progress_line(Totals(read=200, done=20), 200, None) == (
        "progress: 10.0% of 0.0 MB input tokenized, measuring speed")
    line = progress_line(Totals(read=2_000_000, done=500_000, docs=90, tokens=9_000), 2_000_000,
                         Rates(bytes=10_000, docs=3, tokens=300))
    assert line == "progress: 25.0% of 2.0 MB input tokenized, 3 docs/s, 300 tokens/s, ETA 2m30s"
    # A retried bundle may count twice: never more than 100%.
    assert progress_line(Totals(done=3_000_000, docs=5, tokens=7), 2_000_000, None) == (
        "progress: 100% of 2.0 MB input tokenized (5 documents, 7 tokens); shuffling into shards")


def test_a_job_that_does_not_tokenize_shows_documents_not_tokens():
    totals = Totals(read=2_000_000, done=500_000, docs=90)
    line = progress_line(totals, 2_000_000, Rates(bytes=10_000, docs=3, tokens=0), tokenizes=False)
    assert line == "progress: 25.0% of 2.0 MB input processed, 3 docs/s, ETA 2m30s"
    assert progress_line(totals, 2_000_000, None, tokenizes=False) == (
        "progress: 25.0% of 2.0 MB input processed, measuring speed")
    assert progress_line(Totals(done=2_000_000, docs=5), 2_000_000, None, tokenizes=False) == (
        "progress: 100% of 2.0 MB input processed (5 documents); writing shards")
    stream = io.StringIO()
    monitor = Monitor(total_bytes=1_000_000, every_s=3600, stream=stream, bar=True, tokenizes=False).start()
    try:
        reporter = Reporter(monitor.address, 1_000_000)
        for _ in range(3):
            reporter.add(read=250_000, done=250_000, docs=10)
            reporter.flush()
            time.sleep(1.2)
        reporter.close()
    finally:
        monitor.stop()
    assert "processed" in stream.getvalue() and "docs/s" in stream.getvalue() and "token" not in stream.getvalue()


@pytest.mark.slow
def test_the_progress_of_a_text_job_without_a_tokenizer_counts_documents(tmp_path, caplog):
    import logging

    from pipeline.cli import run

    caplog.set_level(logging.INFO, logger="pipeline.progress")
    inputs = [str(REPO / "sample_data" / "pile" / "train" / f"0{i}.jsonl.zst") for i in (0, 1)]
    run.main(["--input", *inputs, "--output_dir", str(tmp_path / "out"), "--output_format", "jsonl",
              "--chunk_mb", "0.25", "--progress_every", "0.05", "--runner", "DirectRunner",
              "--direct_running_mode", "in_memory", "--direct_num_workers", "1"])
    lines = [r.getMessage() for r in caplog.records if r.name == "pipeline.progress"]
    assert any("input processed" in line for line in lines), lines
    assert not [line for line in lines if "token" in line], lines


def _report(monitor, sender="a", **counts) -> bytes:
    return sign(monitor.key, sender, counts)


def test_rates_follow_the_recent_window():
    monitor = Monitor(total_bytes=1000, every_s=10)
    monitor.receive(_report(monitor, read=0, done=0, docs=0, tokens=0))
    monitor.sample(now=0.0)
    assert monitor.rates() is None  # nothing tokenized yet
    for t in range(1, 200):
        monitor.receive(_report(monitor, read=1000, done=t, docs=t, tokens=10 * t))
        monitor.sample(now=float(t))
    # After a slow start the pace doubles: the rates are the last minute's.
    for t in range(200, 260):
        done = 199 + 2 * (t - 199)
        monitor.receive(_report(monitor, read=1000, done=done, docs=done, tokens=0))
        monitor.sample(now=float(t))
    rates = monitor.rates()
    assert abs(rates.bytes - 2.0) < 0.05 and abs(rates.docs - 2.0) < 0.05
    monitor.receive(b"not json")  # ignored
    monitor.receive(_report(monitor, "b", read=5))  # incomplete: ignored
    assert monitor.totals().done == 199 + 2 * 60


def test_counts_from_several_workers_add_up_and_a_lost_datagram_costs_nothing():
    monitor = Monitor(total_bytes=10_000, every_s=3600).start()
    try:
        workers = [Reporter(monitor.address, 10_000) for _ in range(3)]
        for i, worker in enumerate(workers):
            worker.add(read=100 * (i + 1))
            worker.add(done=10 * (i + 1), docs=i, tokens=1000)  # not sent yet: less than a second ago
        for worker in workers:
            worker.flush()  # cumulative: carries what an unsent (or lost) datagram would have
        deadline = time.monotonic() + 10
        while monitor.totals() != Totals(600, 60, 3, 3000) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert monitor.totals() == Totals(read=600, done=60, docs=3, tokens=3000)
        for worker in workers:
            worker.close()
    finally:
        monitor.stop()
    assert monitor.address is None


def test_stop_ends_the_listening_thread_without_waiting_out_its_timeout():
    monitor = Monitor(total_bytes=10, every_s=3600).start()
    monitor._sock.settimeout(600)  # a wait that only a wake-up can end within stop's join
    time.sleep(0.5)  # the thread is waiting with that timeout now
    thread = monitor._thread
    monitor.stop()
    assert not thread.is_alive()


def test_a_reporter_without_a_monitor_only_counts_metrics():
    reporter = Reporter(None, 10)
    reporter.add(read=5, done=5, docs=1, tokens=2)
    reporter.close()  # nothing to send to, nothing raised


SLOW_WORKERS = """
    import os, time
    if os.environ.get("SLOW_CHUNK_S"):
        from pipeline.core import packing
        _pack = packing.pack
        def slow(*args, **kwargs):  # once per chunk, after its batch is tokenized, before it counts as done
            time.sleep(float(os.environ["SLOW_CHUNK_S"]))
            return _pack(*args, **kwargs)
        packing.pack = slow
"""


@pytest.mark.slow
def test_a_long_run_prints_a_percent_and_an_eta(tmp_path):
    """A multi-process DirectRunner job slowed to several progress intervals prints lines from its workers' counts."""
    # sitecustomize runs in every Python process: the driver and each DirectRunner worker process.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SLOW_WORKERS))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]),
               SLOW_CHUNK_S="0.5", TF_CPP_MIN_LOG_LEVEL="3")
    inputs = [str(REPO / "sample_data" / "pile" / "train" / f"0{i}.jsonl.zst") for i in (0, 2)]
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli.main", "run", "--input", *inputs, "--output_dir", str(tmp_path / "out"),
         "--tokenizer_model", str(REPO / "tokenizers" / "sample" / "sample.model"), "--seq_len", "128",
         "--chunk_mb", "0.25", "--direct_num_workers", "2", "--direct_running_mode", "multi_processing",
         "--progress_every", "1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-3000:]
    assert seconds >= 6  # the slowed chunks: several intervals of 1 s
    lines = [m for m in map(LINE_WITH_ETA.search, result.stderr.splitlines()) if m]
    assert lines, result.stderr[-3000:]
    assert all(0 < float(m.group(1)) < 100 for m in lines)
    assert "tokens: " in result.stdout


def test_on_a_terminal_a_progress_bar_replaces_the_lines():
    stream = io.StringIO()
    monitor = Monitor(total_bytes=1_000_000, every_s=3600, stream=stream, bar=True).start()
    try:
        reporter = Reporter(monitor.address, 1_000_000)
        for _ in range(3):
            reporter.add(read=250_000, done=250_000, docs=10, tokens=1000)
            reporter.flush()
            time.sleep(1.2)
        reporter.close()
    finally:
        monitor.stop()
    shown = stream.getvalue()
    assert "tokenized" in shown and "750k/1.00M" in shown and "docs/s" in shown
    assert monitor.lines == []


def _pty(columns: int):
    """A pseudo-terminal of `columns` columns: (the file a program writes to, the other end's fd)."""
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return os.fdopen(child_fd, "w"), main_fd


@pytest.mark.parametrize("columns,bar", [(0, False), (20, False), (120, True)])
def test_a_terminal_too_narrow_for_a_bar_gets_the_progress_lines(columns, bar):
    stream, other_end = _pty(columns)
    try:
        assert progress.bar_fits(stream) is bar
        monitor = Monitor(total_bytes=1_000_000, every_s=0.5, stream=stream).start()
        try:
            reporter = Reporter(monitor.address, 1_000_000)
            for _ in range(3):
                reporter.add(read=250_000, done=250_000, docs=10, tokens=1000)
                reporter.flush()
                time.sleep(1.2)
            reporter.close()
        finally:
            monitor.stop()
        if bar:
            assert monitor.lines == []
            assert b"tokenized" in os.read(other_end, 1 << 16)
        else:
            assert monitor.lines and any("%" in line for line in monitor.lines), monitor.lines
    finally:
        stream.close()
        os.close(other_end)
