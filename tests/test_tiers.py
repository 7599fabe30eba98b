"""The tiers' check (tests/tiers.py) sees what puts a test in the slow tier, and nothing else.

Each test raises the audit event a process start raises, or binds a socket, then takes what the
check saw and clears it: these tests themselves start no process.
"""

import socket
import sys

import tiers


def _taken() -> list[str]:
    seen = list(tiers._seen)
    tiers._seen.clear()
    return seen


def test_a_process_start_is_seen_and_named():
    _taken()
    sys.audit("subprocess.Popen", "horovodrun", ["horovodrun", "-np", "2"], None, None)  # the event alone
    sys.audit("os.fork")
    assert _taken() == ["started a process (subprocess.Popen: horovodrun)", "started a process (os.fork: )"]


def test_a_tcp_server_is_seen_and_a_udp_channel_is_not():
    _taken()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
    assert _taken() == []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        tcp.bind(("127.0.0.1", 0))
    assert _taken() == ["opened a TCP server (('127.0.0.1', 0))"]


def test_beam_pipelines_are_watched_whichever_test_imports_beam_first():
    from apache_beam.pipeline import Pipeline  # TestPipeline and `with beam.Pipeline()` run through it

    assert Pipeline.run.__name__ == "run_noted"
