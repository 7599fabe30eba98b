"""Where a step puts its bulky elements (record blocks, chunks) before a shuffle: in the element, or in files.

A step that makes record blocks hands each to its sink and emits what the sink gives back: the
block itself (`KEEP`: the runner's shuffle carries the bytes), or a reference to the same bytes in
a file (`SpilledRecords`, pipeline/io/record_files.py) that the shard writer reads back. Which sink a job
uses is decided where it runs, never by the steps:

- `KEEP`: Dataflow, Flink and Spark, whose shuffles are made for bulk data.
- `SpillSink` (pipeline/beam/direct/spill.py): DirectRunner (one machine; its shuffle goes through
  the driver): each DoFn appends to a local spill file of its own; also the chunks dedup's join moves.
- `StoreSink`: Beam's DaskRunner, whose tasks hold their outputs in memory as lists: each block is
  one file in a hidden folder of the output directory (local, a shared mount or s3://), named by
  its source, so that a task run again writes the same file with the same bytes; the tasks' outputs
  are references only, and a worker's memory does not grow with the input.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import time

import fsspec
import numpy as np

from pipeline.format.framing import FramedRecords
from pipeline.io.inputs import Chunk
from pipeline.io.publish import publish, temp_name
from pipeline.io.record_files import SpilledChunk, SpilledRecords

LOG = logging.getLogger(__name__)


class RecordSink:
    """Keeps every element as it is (the base of every sink)."""

    def put(self, block: FramedRecords, name: str) -> FramedRecords | SpilledRecords:
        """What to emit for `block`; `name` (unique in the job) names its file where it gets one."""
        return block

    def put_chunk(self, chunk: Chunk) -> Chunk | SpilledChunk:
        """What to emit for a read chunk that waits in a join."""
        return chunk

    def within(self, part: str) -> RecordSink:
        """The sink of one part of the job (a --per_subset branch): its names never meet another part's."""
        return self

    def publish_gathered(self, path: str, blocks: list, count: int, record_bytes: int) -> tuple[int, str] | None:
        """A shard of `count` records published straight from this sink's files, in place order: (bytes, sha256).

        `blocks`: (places, SpilledRecords) pairs. None where this sink cannot (the writer spools instead).
        """
        return None

    def close(self) -> None:
        """Close what this copy of the sink opened (a DoFn's teardown)."""


KEEP = RecordSink()


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
