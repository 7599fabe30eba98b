"""One writer per output directory: a lock taken before anything is written and held for the whole job.

Local disks and EFS/NFS: `flock` on `OUT/.pile-pipeline.lock`, taken without waiting, so a second
run fails at once naming the first (host, pid and start time are in the file). On NFSv4 (EFS) the
lock holds across hosts. The kernel releases it when its holder dies: a killed job leaves no stale
lock. A run that does not get it deletes nothing, so it never touches the first run's spill files.

Object stores have no locks: there the lock is an object written create-only (S3's
`If-None-Match: *`), so of two runs started together one fails at once. Its holder writes it again
every RENEW_S seconds while it runs (`renewed` counts up). A killed job leaves that object behind:
`--overwrite` replaces it (the user says that no run is writing), and `--resume` takes it over once
its holder is gone: a process of this host that no longer exists, or a holder elsewhere that did
not renew it for STALE_S seconds (the resumed run watches it that long). Should that be wrong, the
runs still cannot mix: each writes into its own run directory and the manifest is written
create-only (pipeline/io/outputs.py). On a local disk or EFS the kernel releases a dead holder's
lock: a resumed run takes it as any run does.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import posixpath
import socket
import threading
import time

import fsspec

from pipeline.io.files import NotAFileError, read_bytes
from pipeline.io.publish import create_object, write_failure
from pipeline.io.urls import is_local, reaching, redact_url

LOG = logging.getLogger(__name__)
LOCK_NAME = ".pile-pipeline.lock"
RENEW_S = 30.0  # a lock object's holder writes it again this often
STALE_S = 2.5 * RENEW_S  # a lock object not renewed for this long has no holder


class OutputLockedError(FileExistsError):
    """Another run holds the output directory's lock."""


def _holder_text(run_id: str, started: str | None = None, renewed: int = 0) -> str:
    started = started or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "started": started,
                       "renewed": renewed})


def _pid_gone(pid) -> bool:
    """Whether no process of this host has the id `pid`."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, TypeError, OverflowError):
        return False
    return False


def holder_gone(read_text, wait: float | None = None) -> bool:
    """Whether the run holding a lock object is gone (`read_text()` reads the object, None when there is none).

    Gone: a process of this host that is not there, or a holder that did not renew the object for `wait`
    seconds (STALE_S).
    """
    wait = STALE_S if wait is None else wait
    text = read_text()
    if text is None:
        return True
    try:
        holder = json.loads(text)
    except ValueError:
        holder = {}
    if isinstance(holder, dict) and holder.get("host") == socket.gethostname() and "pid" in holder:
        return _pid_gone(holder["pid"])
    LOG.warning("waiting %.0f s to see whether the run holding the lock (%s) still renews it", wait, _describe(text))
    time.sleep(wait)
    return read_text() in (None, text)


def _describe(text: str) -> str:
    try:
        h = json.loads(text)
        return f"run {h['run_id']}, pid {h['pid']} on {h['host']}, started {h['started']}"
    except (ValueError, KeyError, TypeError):
        return "a run that left no details"


def _makedirs(fs, root: str, shown: str) -> None:
    """Create the output directory, naming it (and a file in its way) when that fails."""
    if not is_local(fs):
        return  # object stores have no directories
    try:
        os.makedirs(root, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = root
        while blocker and not os.path.exists(blocker):
            blocker = os.path.dirname(blocker)
        raise NotADirectoryError(f"--output_dir {shown}: {blocker} is a file, not a directory") from None
    except OSError as e:
        raise write_failure(root, e) from None


def _read_text(url: str, tries: int = 5) -> str | None:
    """A lock object's text, None when there is none.

    Its holder replaces it as it renews it: a read that meets another version than the one it
    found (an object store's ETag changed between the two) is made again.
    """
    for attempt in range(tries):
        try:
            return read_bytes(url).decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except NotAFileError:
            if attempt == tries - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    return None


class OutputLock:
    """The lock of one output directory, held by this process until `release`."""

    def __init__(self, output_dir: str, run_id: str, fd: int | None, location: str):
        self.output_dir = output_dir
        self.run_id = run_id
        self._fd = fd  # local: the locked file
        self._location = location  # of the lock file or object
        self._stop = threading.Event()
        self._renewal = None
        if fd is None:  # an object: written again while the run holds it
            self._renewal = threading.Thread(target=self._renew, name="pile-lock-renewal", daemon=True)
            self._renewal.start()

    def _renew(self) -> None:
        started, renewed = None, 0
        while not self._stop.wait(RENEW_S):
            with contextlib.suppress(OSError, ValueError):
                holder = json.loads(read_bytes(self._location))
                if holder.get("run_id") != self.run_id:
                    return  # replaced (--overwrite): never written over
                started, renewed = holder.get("started", started), renewed + 1
                fs, path = fsspec.core.url_to_fs(self._location)
                fs.pipe_file(path, _holder_text(self.run_id, started, renewed).encode())

    @classmethod
    def acquire(cls, output_dir: str, run_id: str, overwrite: bool, resume: bool = False) -> OutputLock:
        """Take the lock of `output_dir` (created if missing) for run `run_id`.

        Raises:
            OutputLockedError: another run holds it (on an object store: or a killed run left it,
                and neither `overwrite` is on nor, with `resume`, is its holder gone).
        """
        shown = redact_url(output_dir)
        with reaching("--output_dir", output_dir):
            fs, root = fsspec.core.url_to_fs(output_dir)
            _makedirs(fs, root, shown)
            if is_local(fs):
                path = os.path.join(root, LOCK_NAME)
                return cls(output_dir, run_id, cls._flock(path, run_id, shown), path)
            url = posixpath.join(output_dir.rstrip("/"), LOCK_NAME)
            cls._create_object(url, run_id, overwrite, resume, shown)
            return cls(output_dir, run_id, None, url)

    @staticmethod
    def _flock(path: str, run_id: str, shown: str) -> int:
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise write_failure(path, e) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace")
                os.close(fd)
                raise OutputLockedError(
                    f"--output_dir {shown} is being written by another run ({_describe(holder)}): wait for "
                    "it to finish or choose another directory"
                ) from None
            # A run that just finished removes the file: locking the removed file locks nothing.
            try:
                if os.path.samestat(os.fstat(fd), os.stat(path)):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, _holder_text(run_id).encode(), 0)
        return fd

    @staticmethod
    def _create_object(url: str, run_id: str, overwrite: bool, resume: bool, shown: str) -> None:
        for _ in range(2):  # again if the holder removed it between the two requests
            if create_object(url, _holder_text(run_id)):
                return
            try:
                holder = _describe(read_bytes(url).decode("utf-8", "replace"))
                break
            except FileNotFoundError:
                holder = "a run that has just finished"
        if resume and not overwrite and holder_gone(lambda: _read_text(url)):
            LOG.warning("taking over the lock of %s (%s): its holder is gone (--resume)", shown, holder)
        elif not overwrite:
            hint = ("it is still writing (it renews its lock): wait for it" if resume else
                    "that run is still writing, or it was killed. Wait for it; if no run is writing, pass --overwrite "
                    "(or --resume to take up the killed run's work)")
            raise OutputLockedError(f"--output_dir {shown} is locked by {holder}: {hint}")
        else:
            LOG.warning("replacing the lock of %s (%s): --overwrite says that no run is writing", shown, holder)
        fs, path = fsspec.core.url_to_fs(url)
        fs.pipe_file(path, _holder_text(run_id).encode())

    def release(self) -> None:
        """Give the lock up (and remove the lock file or object, if it is still ours)."""
        self._stop.set()
        if self._renewal is not None:
            self._renewal.join()
        if self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._location)
            os.close(self._fd)  # after the unlink: see _flock
            self._fd = None
            return
        # On an object store: never fail the job's own ending over the lock (a killed job leaves it too).
        with contextlib.suppress(OSError, ValueError):
            if json.loads(read_bytes(self._location)).get("run_id") == self.run_id:
                fs, path = fsspec.core.url_to_fs(self._location)
                fs.rm(path)
