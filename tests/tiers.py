"""The two test tiers kept honest: a test not marked `slow` starts no process, runs no Beam pipeline, opens no server.

`pytest -m "not slow"` is the contributors' loop (docs/development.md, "Two test tiers"). A test
that starts another process (subprocess, fork, multiprocessing), runs a Beam pipeline or opens a
server (a socket that listens) belongs to the slow tier; `tests/conftest.py` takes these hooks,
which fail such a test when it is not marked `slow`, naming what it did. They watch through
Python's audit events (every process start raises one: `sys.addaudithook`), a wrapper around
`socket.socket.listen`, and one around Beam's `Pipeline.run`, put in place when Beam is imported,
whichever test imports it first. What a test's fixtures do as they are set up for it counts as the
test's own; what threads started before it do (a previous test's leftovers) does not.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import platform
import socket
import sys
import threading

import pytest

_PROCESS_EVENTS = {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn",
                   "os.system"}
_seen: list[str] = []  # what the running test did, in order
_before: set[int] = set()  # threads alive before the running test's setup, but the test's own


def _audit(event: str, args: tuple) -> None:
    if event in _PROCESS_EVENTS and threading.get_ident() not in _before:
        _seen.append(f"started a process ({event}: {str(args[0])[:80] if args else ''})")


def _watch_listening() -> None:
    listen = socket.socket.listen

    def listen_noted(self, *args):
        if threading.get_ident() not in _before:
            _seen.append(f"opened a server (listening on {self.getsockname()})")
        return listen(self, *args)

    socket.socket.listen = listen_noted


def _watch_runs(pipeline_class) -> None:
    run = pipeline_class.run

    def run_noted(self, *args, **kwargs):
        _seen.append("ran a Beam pipeline")
        return run(self, *args, **kwargs)

    pipeline_class.run = run_noted


class _WhenBeamImports(importlib.abc.MetaPathFinder):
    """Wraps `apache_beam.pipeline.Pipeline.run` as that module is first executed."""

    NAME = "apache_beam.pipeline"

    def find_spec(self, name, path=None, target=None):
        if name != self.NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_watch(module):
            exec_module(module)
            _watch_runs(module.Pipeline)

        spec.loader.exec_module = exec_and_watch
        return spec


# TensorFlow's import asks platform.processor(), which runs `uname -p` once per process: asked here,
# so that the first test to import TensorFlow is not taken for one that starts a process.
platform.processor()
sys.addaudithook(_audit)
_watch_listening()
if _WhenBeamImports.NAME in sys.modules:
    _watch_runs(sys.modules[_WhenBeamImports.NAME].Pipeline)
else:
    sys.meta_path.insert(0, _WhenBeamImports())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test's record starts with its setup: fixtures set up for it count as its own."""
    global _before
    _before = {thread.ident for thread in threading.enumerate()} - {threading.get_ident()}
    _seen.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A passing test that is not marked slow fails if it started a process, ran Beam or opened a server."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or item.get_closest_marker("slow") is not None or not _seen:
        return
    what = "; ".join(list(dict.fromkeys(_seen))[:3])  # the first three, each once
    report.outcome = "failed"
    report.longrepr = (f"{item.nodeid} is in the fast tier but {what}: mark it @pytest.mark.slow "
                       f"(docs/development.md, \"Two test tiers\")")
