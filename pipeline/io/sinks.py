"""Where a step puts its bulky elements (record blocks, chunks) before a shuffle: in the element, or in files.

A step that makes record blocks hands each to its sink and emits what the sink gives back: the
block itself (`KEEP`: the runner's shuffle carries the bytes), or a reference to the same bytes in
a file (`SpilledRecords`, pipeline/io/record_files.py) that the shard writer reads back, and may
publish a shard straight from its files (`publish_gathered`; else the writer puts the records in
order through pipeline/io/spool.py). Which sink a job uses is its runner profile's choice
(pipeline/beam/runners/), never the steps':

- `KEEP`: Dataflow, Flink and Spark, whose shuffles are made for bulk data.
- `SpillSink` (pipeline/beam/runners/direct/spill.py): DirectRunner (one machine; its shuffle goes
  through the driver): each DoFn appends to a local spill file of its own; also the chunks dedup's join moves.
- `StoreSink` (pipeline/beam/runners/dask/store.py): Beam's DaskRunner, whose tasks hold their
  outputs in memory as lists: each block is one file in a hidden folder of the output directory.

The interface and `KEEP` are shared by every runner.
"""

from __future__ import annotations

from pipeline.format.framing import FramedRecords
from pipeline.io.inputs import Chunk
from pipeline.io.record_files import SpilledChunk, SpilledRecords


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
