"""Dask's record sink: each record block one file in a hidden folder of the output directory.

A dask task holds its outputs in memory as one list, so record blocks go to files and only
references cross Dask: a worker's memory does not grow with the input. The folder lies in the
output directory (local, a shared mount or s3://: every worker reaches it as it reaches the output),
each file named by its block's source, so that a task run again (its worker lost) writes the same
file with the same bytes. The folder is removed when the job ends, however it ends.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import posixpath
import time
from collections.abc import Iterator

import fsspec
import numpy as np

from pipeline.format.framing import FramedRecords
from pipeline.io.publish import publish, temp_name
from pipeline.io.record_files import SpilledRecords
from pipeline.io.sinks import KEEP, RecordSink

LOG = logging.getLogger("pipeline")


class StoreSink(RecordSink):
    """Each block one file in `folder` (any store), named by its `name`: written again, the same file."""

    def __init__(self, folder: str, part: str = ""):
        self.folder, self._part = folder.rstrip("/"), part

    def put(self, block: FramedRecords, name: str) -> SpilledRecords:
        """A reference to the block, published as a file of its own (the same name and bytes if run again)."""
        digest = hashlib.blake2b(f"{self._part}\0{name}".encode(), digest_size=16).hexdigest()
        path = posixpath.join(self.folder, f"{digest}.records")
        publish(path, [block.data])
        ends = np.asarray(block.ends, np.int64)
        return SpilledRecords.of(path, ends - np.diff(ends, prepend=0), ends)

    def within(self, part: str) -> StoreSink:
        """The same folder, names apart."""
        return StoreSink(self.folder, f"{self._part}/{part}")


def store_folder(output_dir: str) -> str:
    """A new hidden folder for a job's record files in its output directory.

    Named as our temp files are, so that an --overwrite run removes one a killed run left.
    """
    return posixpath.join(output_dir.rstrip("/"), temp_name("records"))


def remove_folder(folder: str | None, attempts: int = 5) -> None:
    """Delete a job's record folder and what is in it (after success or failure); nothing if there is none.

    After a failure, workers the job lost (its scheduler gone) may still be writing into it: tried
    again a few times, then left with a warning (a temp name: the next --overwrite removes it), so
    that the job's own failure is the error reported.
    """
    if not folder:
        return
    fs, root = fsspec.core.url_to_fs(folder)
    for attempt in range(attempts):
        try:
            fs.rm(root, recursive=True)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if attempt == attempts - 1:
                LOG.warning("could not remove the job's record folder %s (%s); the next --overwrite removes it",
                            folder, e)
                return
            time.sleep(0.2 * (attempt + 1))


@contextlib.contextmanager
def record_store(output_dir: str, translate_only: bool = False) -> Iterator[RecordSink]:
    """A run's sink: its record blocks in a new hidden folder of `output_dir`, removed at the end (KEEP: none)."""
    folder = None if translate_only else store_folder(output_dir)
    try:
        yield StoreSink(folder) if folder else KEEP
    finally:
        remove_folder(folder)
