"""SIGTERM and SIGINT end a run cleanly: its worker processes stopped, what it made removed, one line.

`timeout`, systemd and Kubernetes stop a process with SIGTERM (then SIGKILL after a grace period);
a terminal sends SIGINT. Inside `interruptible()` either one stops this process's descendants (the
runner's worker processes, found through /proc) and then raises `Interrupted` in the main thread,
so that every `finally` of the run (lock, spill files, temp dir) runs with nothing left writing;
the command then leaves without finalizing the interpreter (`leave_if_stopped`: worker threads in
native code would abort the process). A second signal while that happens is ignored. SIGKILL
cannot be caught: what a killed run leaves is cleared by the next run (pipeline/io/scratch.py) or
`--overwrite` (pipeline/io/outputs.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

GRACE_S = 3.0  # how long the workers get to exit after SIGTERM before SIGKILL


class Interrupted(BaseException):  # noqa: N818 -- like KeyboardInterrupt: not an Exception, never swallowed
    """The run was stopped by a signal; `signum` is the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _parents() -> dict[int, int]:
    """The parent of every live process, by process id (Linux /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold spaces
        if fields[0] != b"Z":
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (children, theirs, ...)."""
    parents = _parents() if os.path.isdir("/proc") else {}
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def stop_descendants(grace_s: float = GRACE_S) -> None:
    """SIGTERM every descendant of this process; SIGKILL those still there after `grace_s`."""
    pids = descendants(os.getpid())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        alive = set(descendants(os.getpid()))
        pids = [p for p in pids if p in alive]
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


_caught: list[int] = []  # the signal that stopped this run, once one has


def leave_if_stopped(status: int) -> None:
    """Exit at once with `status` when a signal stopped this run, without finalizing the interpreter.

    The runner's worker threads are daemon threads, and some are still inside a native call (a
    tokenizer's encode releases the GIL). When the interpreter finalizes, such a thread is made to
    exit as it takes the GIL back, by unwinding through C++ frames that do not allow it: the process
    aborts (`terminate called without an active exception`, SIGABRT) after the run's cleanup. By
    now everything the run made is removed; the log and output streams are flushed first.
    """
    if caught_signal() is None:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to say
            stream.flush()
    os._exit(status)


def caught_signal() -> int | None:
    """The signal that is stopping this run, or None.

    A runner may wrap `Interrupted` in an error of its own (DirectRunner does where the main thread
    runs a DoFn): this says what that error is.
    """
    return _caught[0] if _caught else None


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within: SIGTERM or SIGINT stops the workers and raises Interrupted (main thread only; else a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def handler(signum, _frame):
        if _caught:
            return  # already stopping
        _caught.append(signum)
        # The runner's threads that watch its workers fail as the workers stop: that is this stop, not news.
        threading.excepthook = lambda args: None
        stop_descendants()
        raise Interrupted(signum)

    saved = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    hook = threading.excepthook
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)
        threading.excepthook = hook
