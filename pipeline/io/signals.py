"""SIGTERM and SIGINT end a run cleanly: its worker processes stopped, what it made removed, one line.

`timeout`, systemd and Kubernetes stop a process with SIGTERM (then SIGKILL after a grace period);
a terminal sends SIGINT. Inside `interruptible()` either one stops this process's descendants (the
runner's worker processes, found through /proc) and then raises `Interrupted` in the main thread,
so that every `finally` of the run (lock, spill files, temp dir) runs with nothing left writing;
the command then leaves without finalizing the interpreter (`leave_if_stopped`: worker threads in
native code would abort the process), once every descendant is gone. A second signal while that
happens is ignored. SIGKILL cannot be caught: what a killed run leaves is cleared by the next run
(pipeline/io/scratch.py) or `--overwrite` (pipeline/io/outputs.py).

A runner may be starting a worker as the signal comes (DirectRunner starts each through a shell
that then starts Python), and its threads go on until the process leaves: so the stop goes on until
the process leaves (`_keep_stopping`), anything that appears is stopped too, and a worker whose
shell was stopped first stays this process's descendant (Linux's child subreaper), never an orphan
left running, or waited for by a runner thread that never ends.
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
ROUND_S = 0.05  # between looks for descendants while stopping
GONE_S = 2.0  # how long killed processes get to be gone
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


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


def _resource_tracker(pid: int) -> bool:
    """Whether `pid` is multiprocessing's resource tracker (started for a local Dask cluster's semaphores).

    It is left running: it exits by itself once this process has (at the end of its pipe), and one
    stopped is started again by the next semaphore released, which then reports each as unknown
    (a KeyError traceback a semaphore).
    """
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker" in f.read()
    except OSError:
        return False


def stopping(pid: int) -> list[int]:
    """The descendants of `pid` that a stop stops: all but multiprocessing's resource tracker."""
    return [p for p in descendants(pid) if not _resource_tracker(p)]


def _send(pids, signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def stop_descendants(grace_s: float = GRACE_S) -> None:
    """SIGTERM every descendant of this process, and each that appears meanwhile; SIGKILL those left.

    SIGKILL after `grace_s`; returns once none is left (or GONE_S after that).
    """
    signalled: set[int] = set()
    deadline = time.monotonic() + grace_s
    while alive := stopping(os.getpid()):
        if time.monotonic() >= deadline:
            break
        _send([p for p in alive if p not in signalled], signal.SIGTERM)
        signalled.update(alive)
        time.sleep(ROUND_S)
    gone_by = time.monotonic() + GONE_S
    while alive and time.monotonic() < gone_by:
        _send(alive, signal.SIGKILL)
        time.sleep(0.01)
        alive = stopping(os.getpid())


def _adopt_orphans() -> None:
    """Make this process the parent of its descendants' orphans (Linux; elsewhere nothing).

    A worker whose parent (the shell a runner started it through) is stopped first then stays
    among this process's descendants, to be stopped too, instead of running on as init's child.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _keep_stopping() -> None:
    """Until the process leaves: stop whatever a runner's thread starts after the stop."""
    while True:
        time.sleep(ROUND_S)
        stop_descendants()


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
    stop_descendants()  # this process leaves after its workers, never before
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
        _adopt_orphans()
        stop_descendants()
        threading.Thread(target=_keep_stopping, name="keep-stopping", daemon=True).start()
        raise Interrupted(signum)

    saved = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    hook = threading.excepthook
    try:
        yield
    finally:
        for s, previous in saved.items():
            signal.signal(s, previous)
        threading.excepthook = hook
