"""Record blocks and read chunks as references to bytes in files, and reading them back.

A step that puts its bulky elements into files (a sink, pipeline/io/sinks.py: a local spill file on
one machine, a file of its own in the output's store on Dask) emits a reference instead:
`SpilledRecords` for a block of framed records, `SpilledChunk` for a read chunk's lines. Only the
references cross the runner's shuffle; the reader of a reference (the shard writer, the tokenizing
stage after dedup's join) reads the bytes back with `RecordReader` / `load_chunk`, from a local
path with pread or from a store's URL with a range read. The bytes are the same either way.
Shared by every runner whose sink writes files (DirectRunner's, Dask's: pipeline/beam/runners/).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

import fsspec
import numpy as np

from pipeline.core.documents import Line
from pipeline.format.framing import FramedRecords
from pipeline.io.inputs import Chunk


@dataclasses.dataclass(frozen=True, eq=False)
class SpilledRecords:
    """Framed records in a spill file: record i is the file's bytes [starts[i], ends[i]).

    Held as (first, size, count) when the records lie back to back and are of one size (a packed
    block's always are), else as the two arrays (`bounds`, [2, n]): a reference that crosses a
    shuffle does not grow with its records. Make one with `of` or `uniform`.
    """

    path: str
    first: int = 0
    size: int = 0
    count: int = 0
    bounds: np.ndarray | None = None

    @classmethod
    def uniform(cls, path: str, first: int, size: int, count: int) -> SpilledRecords:
        """`count` records of `size` bytes back to back from byte `first`."""
        return cls(path, int(first), int(size), int(count))

    @classmethod
    def of(cls, path: str, starts: np.ndarray, ends: np.ndarray) -> SpilledRecords:
        """The records [starts[i], ends[i]) of a file, held compactly where they allow it."""
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        sizes = ends - starts
        if len(sizes) and (sizes == sizes[0]).all() and (starts[1:] == ends[:-1]).all():
            return cls.uniform(path, starts[0], sizes[0], len(sizes))
        return cls(path, count=len(sizes), bounds=np.stack([starts, ends]))

    @property
    def starts(self) -> np.ndarray:
        """Where each record starts in the file (int64)."""
        if self.bounds is not None:
            return self.bounds[0]
        return self.first + self.size * np.arange(self.count, dtype=np.int64)

    @property
    def ends(self) -> np.ndarray:
        """Where each record ends in the file (int64)."""
        return self.bounds[1] if self.bounds is not None else self.starts + self.size

    def __len__(self) -> int:
        return self.count

    def span(self, i: int) -> tuple[int, int]:
        """Record i's (start, end) in the file."""
        if self.bounds is not None:
            return int(self.bounds[0, i]), int(self.bounds[1, i])
        return self.first + i * self.size, self.first + (i + 1) * self.size

    def take(self, indices: Iterable[int]) -> SpilledRecords:
        """A reference to the records at `indices`, in that order."""
        indices = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices), np.int64)
        return SpilledRecords.of(self.path, self.starts[indices], self.ends[indices])

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
        self._stores: dict[str, fsspec.AbstractFileSystem] = {}

    def _pread(self, path: str, start: int, end: int) -> bytes:
        if "://" in path:  # a file in a store (Dask's sink, pipeline/beam/runners/dask/store.py)
            protocol = path.split("://", 1)[0]
            fs = self._stores.get(protocol)
            if fs is None:
                fs = self._stores[protocol] = fsspec.filesystem(protocol)
            data = fs.cat_file(path, start=start, end=end)
        else:
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
        return self._pread(block.path, *block.span(i))

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


# A spilled chunk's line table: per line its number, offset, oversized, input_end and length (int64).
_LINE_FIELDS = 5


@dataclasses.dataclass(frozen=True)
class SpilledChunk:
    """A read chunk whose lines are in a spill file: bytes [start, end) hold its line table, then the lines' bytes.

    What the chunk's consumers need before loading it rides along (file_index, chunk_index, path,
    input_bytes); `load()` gives back the equal Chunk.
    """

    file_index: int
    chunk_index: int
    path: str  # the input file's
    input_bytes: int
    lines: int
    spill_path: str
    start: int
    end: int

    def load(self) -> Chunk:
        """The chunk, read back from its file (an OSError if the file does not hold it)."""
        with open(self.spill_path, "rb") as f:
            data = os.pread(f.fileno(), self.end - self.start, self.start)
        table_bytes = 8 * _LINE_FIELDS * self.lines
        if len(data) < table_bytes:
            raise OSError(f"spill file {self.spill_path} is shorter than its chunk ({self.start}..{self.end})")
        table = np.frombuffer(data, np.int64, _LINE_FIELDS * self.lines).reshape(self.lines, _LINE_FIELDS)
        lengths = table[:, 4]
        if (lengths < 0).any() or table_bytes + int(lengths.sum()) != len(data):
            raise OSError(f"spill file {self.spill_path}: the chunk at {self.start} is damaged")
        view = memoryview(data)
        ends = (table_bytes + np.cumsum(lengths)).tolist()
        starts = [table_bytes, *ends[:-1]][: len(ends)]
        lines = tuple(Line(number, offset, bytes(view[a:b]), oversized, input_end)
                      for (number, offset, oversized, input_end, _), a, b
                      in zip(table.tolist(), starts, ends, strict=True))
        return Chunk(self.file_index, self.chunk_index, self.path, lines, self.input_bytes)


def spillable(chunk: Chunk) -> bool:
    """Whether `spill_chunk` can write the chunk: none of its lines carries a columnar row (those stay as they are)."""
    return all(line.row is None for line in chunk.lines)


def spill_chunk(writer, chunk: Chunk) -> SpilledChunk:
    """Write a chunk's lines once through `writer` (`write_bytes(data) -> (path, start)`); the reference."""
    table = np.array([(line.number, line.offset, line.oversized, line.input_end, len(line.data))
                      for line in chunk.lines], np.int64).reshape(-1, _LINE_FIELDS)
    data = b"".join([table.tobytes(), *(line.data for line in chunk.lines)])
    path, start = writer.write_bytes(data)
    return SpilledChunk(chunk.file_index, chunk.chunk_index, chunk.path, chunk.input_bytes, len(chunk.lines),
                        path, start, start + len(data))


def load_chunk(chunk: Chunk | SpilledChunk) -> Chunk:
    """A chunk, wherever it is."""
    return chunk.load() if isinstance(chunk, SpilledChunk) else chunk


