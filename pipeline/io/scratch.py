"""A job's scratch space: what it and its libraries put in the system temp dir goes into one folder of its own.

Beam's DirectRunner (and other libraries) create temporary folders and do not always remove them;
a run of `pile-pipeline run` points the temp dir (`tempfile.tempdir`, and TMPDIR for the worker
processes it starts) at a folder of its own and removes that folder when it ends.

A run killed with SIGKILL cannot remove its folder: each folder holds a lock file (`flock`, which
the kernel releases when its holder dies), and every run first removes the folders of ours whose
lock nobody holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import tempfile
from collections.abc import Iterator

LOCK = ".owner.lock"


def _held(folder: str) -> bool:
    """Whether a live run holds `folder`'s lock (a folder without one is another version's: left alone)."""
    try:
        fd = os.open(os.path.join(folder, LOCK), os.O_RDWR)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # releases the lock, if it was taken here
    return False


def clear_abandoned(prefix: str = "pile-pipeline-", base: str | None = None) -> list[str]:
    """Remove the scratch folders of runs that were killed (their lock is free); returns them."""
    base = base or tempfile.gettempdir()
    removed = []
    for folder in glob.glob(os.path.join(glob.escape(base), glob.escape(prefix) + "*")):
        if os.path.isdir(folder) and not os.path.islink(folder) and not _held(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def private_temp_dir(prefix: str = "pile-pipeline-") -> Iterator[str]:
    """Make the system temp dir a new folder for the duration; remove it, with all it holds, after."""
    clear_abandoned(prefix)
    path = tempfile.mkdtemp(prefix=prefix)
    # Locked before it has its name: another run never sees it free.
    fd = os.open(os.path.join(path, LOCK + ".new"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held until this run ends or dies
    os.rename(os.path.join(path, LOCK + ".new"), os.path.join(path, LOCK))
    saved_dir, saved_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = path
    os.environ["TMPDIR"] = path
    try:
        yield path
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
