"""The tiers' check (tests/tiers.py) sees what puts a test in the slow tier, and nothing else.

Each test raises the audit event a process start raises, or binds a socket, then takes what the
check saw and clears it: these tests themselves start no process.
"""

import socket
import sys
import threading

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


def test_a_listening_socket_is_seen_and_a_bound_one_is_not():
    _taken()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:  # as urllib3 probes for IPv6
        bound.bind(("127.0.0.1", 0))
    assert _taken() == []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        where = server.getsockname()
    assert _taken() == [f"opened a server (listening on {where})"]


def test_beam_pipelines_are_watched_whichever_test_imports_beam_first():
    from apache_beam.pipeline import Pipeline  # TestPipeline and `with beam.Pipeline()` run through it

    assert Pipeline.run.__name__ == "run_noted"


def test_what_a_thread_started_before_the_test_does_is_not_the_tests():
    go, done = threading.Event(), threading.Event()

    def leftover():  # a previous test's thread, still running
        go.wait()
        sys.audit("subprocess.Popen", "leftover", ["leftover"], None, None)
        done.set()

    thread = threading.Thread(target=leftover)
    thread.start()
    tiers.pytest_runtest_setup(None)  # as the next test's setup sees it
    _taken()
    go.set()
    done.wait(10)
    thread.join()
    assert _taken() == []
