"""A job's scratch space: what it and its libraries put in the system temp dir goes into one folder of its own.

Beam's DirectRunner (and other libraries) create temporary folders and do not always remove them;
a run of `pile-pipeline run` points the temp dir (`tempfile.tempdir`, and TMPDIR for the worker
processes it starts) at a folder of its own and removes that folder when it ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def private_temp_dir(prefix: str = "pile-pipeline-") -> Iterator[str]:
    """Make the system temp dir a new folder for the duration; remove it, with all it holds, after."""
    path = tempfile.mkdtemp(prefix=prefix)
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
