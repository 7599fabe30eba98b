"""On one machine, records go from the tokenizing workers to the shard writers through local files.

DirectRunner keeps every shuffle in its driver process: each record block that goes to
GroupByShard is sent from a worker to the driver, held there, and sent back to the worker that
writes the shard (measured: ~5 s and ~2.3 bytes of driver memory per input byte at 75 M tokens).
When all workers share a filesystem with the driver, the producers append their framed blocks to
a spill file of their own instead and emit a small `SpilledRecords` reference; only references go
through the shuffle, and the shard writer reads the bytes back (from the page cache, mostly).
The bytes written to the shards are the same either way, and the writer reads each record once
(into its spool, pipeline/io/spool.py), so neither the driver nor a writer holds a shard's records
in memory.

The spill directory is hidden inside a local output directory (so it needs no other disk, and an
`--overwrite` run removes what a killed run left) and removed when the job ends. On a remote output
(s3://) it is a local temporary directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable

import fsspec
import numpy as np

from pipeline.format.framing import FramedRecords
from pipeline.io.publish import temp_name, write_failure
from pipeline.io.urls import is_local

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class SpilledRecords:
    """Framed records in a spill file: record i is the file's bytes [starts[i], ends[i])."""

    path: str
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    def take(self, indices: Iterable[int]) -> SpilledRecords:
        """A reference to the records at `indices`, in that order."""
        indices = np.asarray(list(indices), np.int64)
        return SpilledRecords(self.path, self.starts[indices], self.ends[indices])

    def load(self) -> FramedRecords:
        """Read the records back as one block."""
        with RecordReader() as reader:
            parts = [reader.read(self, i) for i in range(len(self))]
        return FramedRecords(b"".join(parts), np.cumsum(self.ends - self.starts, dtype=np.int64))


def load(block: FramedRecords | SpilledRecords) -> FramedRecords:
    """The records of a block, wherever they are."""
    return block.load() if isinstance(block, SpilledRecords) else block


class RecordReader:
    """Reads framed records from blocks of either kind, keeping spill files open.

    A shard writer takes its records one block at a time (into its spool), so it never holds the shard.
    """

    # A spilled block's records are read with one read of the file range they span when it holds
    # little else: `take` splits a block among shards, and with hundreds of shards reading the whole
    # range for each would read every block hundreds of times.
    SPAN_SLACK_BYTES = 1 << 20

    def __init__(self):
        self._files: dict[str, int] = {}

    def _pread(self, path: str, start: int, end: int) -> bytes:
        fd = self._files.get(path)
        if fd is None:
            fd = self._files[path] = os.open(path, os.O_RDONLY)
        data = os.pread(fd, end - start, start)
        if len(data) != end - start:
            raise OSError(f"spill file {path} is shorter than its records ({start}..{end})")
        return data

    def read(self, block: FramedRecords | SpilledRecords, i: int) -> bytes | memoryview:
        """Record i of `block`, framed."""
        if not isinstance(block, SpilledRecords):
            return block.framed(i)
        return self._pread(block.path, int(block.starts[i]), int(block.ends[i]))

    def read_block(self, block: FramedRecords | SpilledRecords) -> tuple[bytes, np.ndarray, np.ndarray]:
        """All records of `block`, framed: (buffer, starts, ends), record i is buffer[starts[i]:ends[i]]."""
        if not isinstance(block, SpilledRecords):
            return block.data, np.concatenate([[0], block.ends[:-1]]).astype(np.int64), block.ends
        starts, ends = block.starts.astype(np.int64), block.ends.astype(np.int64)
        if not len(starts):
            return b"", starts, ends
        lo, hi = int(starts.min()), int(ends.max())
        if hi - lo <= 2 * int((ends - starts).sum()) + self.SPAN_SLACK_BYTES:
            return self._pread(block.path, lo, hi), starts - lo, ends - lo
        # Sparse: one read per run of records that follow each other in the file, in block order.
        breaks = np.flatnonzero(starts[1:] != ends[:-1]) + 1
        data = b"".join(self._pread(block.path, int(starts[a]), int(ends[b - 1]))
                        for a, b in zip([0, *breaks.tolist()], [*breaks.tolist(), len(starts)], strict=True))
        new_ends = np.cumsum(ends - starts)
        return data, new_ends - (ends - starts), new_ends

    def close(self) -> None:
        """Close the spill files opened so far."""
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SpillWriter:
    """Appends blocks to one file of its own in the spill directory; one per DoFn instance."""

    def __init__(self, spill_dir: str):
        self._dir = spill_dir
        self._file = None
        self._path = ""
        self._size = 0

    def write(self, block: FramedRecords) -> SpilledRecords:
        """Append `block`; the reference is valid once this returns (the write is unbuffered)."""
        try:
            if self._file is None:
                self._path = os.path.join(self._dir, f"{uuid.uuid4().hex}.records")
                self._file = open(self._path, "ab", buffering=0)  # noqa: SIM115 -- kept open across bundles
            view = memoryview(block.data)
            while view:
                view = view[self._file.write(view):]
        except OSError as e:
            # The file may now end with part of this block: a retry must start a new one.
            self.close()
            self._size = 0
            raise write_failure(self._path or self._dir, e) from e
        base = self._size
        self._size += len(block.data)
        ends = block.ends + base
        return SpilledRecords(self._path, ends - np.diff(block.ends, prepend=0), ends)

    def close(self) -> None:
        """Close the file (its references stay valid: the file stays until the job ends)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def make_spill_dir(output_dir: str) -> str:
    """A new, empty spill directory for one job (see the module docstring for where)."""
    fs, root = fsspec.core.url_to_fs(output_dir)
    if is_local(fs):
        # Hidden and named like our temp files, so prepare_output_dir's --overwrite clean-up covers it.
        path = os.path.join(root, temp_name("spill"))
        os.makedirs(path)
        return path
    return tempfile.mkdtemp(prefix="pile-pipeline-spill-")


def remove_spill_dir(spill_dir: str | None) -> None:
    """Delete a job's spill directory (after success or failure)."""
    if spill_dir and os.path.exists(spill_dir):
        shutil.rmtree(spill_dir, ignore_errors=True)
        LOG.debug("removed %s", spill_dir)
