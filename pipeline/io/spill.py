"""On one machine, records go from the tokenizing workers to the shard writers through local files.

DirectRunner keeps every shuffle in its driver process: each record block that goes to
GroupByShard is sent from a worker to the driver, held there, and sent back to the worker that
writes the shard: time, and driver memory that grows with the input.
When all workers share a filesystem with the driver, the producers append their framed blocks to
a spill file of their own instead and emit a small `SpilledRecords` reference; only references go
through the shuffle, and the shard writer reads the bytes back (from the page cache, mostly).
The bytes written to the shards are the same either way, and the writer reads each record once,
so neither the driver nor a writer holds a shard's records in memory. The writer reads them into
its spool (pipeline/io/spool.py), which turns random reads into sequential ones, unless the spill
files are on a local disk and small enough beside the free memory to be in the page cache still:
then `ordered_pieces` gathers the shard straight from them in order (mapped into memory), one copy
instead of three with no second pass through the disk (a large share of the writer's CPU, and of
the wall time it adds after the last input is tokenized).

With --dedup or --decontaminate the read chunks meet their removed documents' records in a
CoGroupByKey; with a spill directory each chunk's lines go to a spill file once, as the chunk is
read, and only a `SpilledChunk` reference crosses the join: the tokenizing stage loads the chunk
back (one chunk at a time) instead of the driver holding all the text.

The spill directory is hidden inside a local output directory (so it needs no other disk, and an
`--overwrite` run removes what a killed run left) and removed when the job ends. On a remote output
(s3://) it is a local temporary directory.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator

import fsspec
import numpy as np

from pipeline.core.documents import Line
from pipeline.format.framing import FramedRecords
from pipeline.io import localfs
from pipeline.io.inputs import Chunk
from pipeline.io.publish import temp_name, write_failure
from pipeline.io.spool import SpoolError
from pipeline.io.urls import is_local

LOG = logging.getLogger(__name__)
# Spill bytes up to this share of the available memory are taken to be still cached. The mapped
# files count in the writer's RSS (a fault maps the page cache's whole folio, up to 2 MB, around a
# record), clean pages the kernel can reclaim: this share also bounds that.
CACHED_SHARE = 0.25
GATHER_PIECE_BYTES = 4 << 20


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


class SpillWriter:
    """Appends blocks to one file of its own in the spill directory; one per DoFn instance."""

    def __init__(self, spill_dir: str):
        self._dir = spill_dir
        self._file = None
        self._path = ""
        self._size = 0

    def write(self, block: FramedRecords) -> SpilledRecords:
        """Append `block`; the reference is valid once this returns (the write is unbuffered)."""
        path, base = self.write_bytes(block.data)
        ends = block.ends + base
        return SpilledRecords.of(path, ends - np.diff(block.ends, prepend=0), ends)

    def write_bytes(self, data) -> tuple[str, int]:
        """Append `data` (any buffer); (the file's path, where the data starts in it)."""
        try:
            if self._file is None:
                self._path = os.path.join(self._dir, f"{uuid.uuid4().hex}.records")
                self._file = open(self._path, "ab", buffering=0)  # noqa: SIM115 -- kept open across bundles
            view = memoryview(data).cast("B")
            while view:
                view = view[self._file.write(view):]
        except OSError as e:
            # The file may now end with part of this block: a retry must start a new one.
            self.close()
            self._size = 0
            raise write_failure(self._path or self._dir, e) from e
        base = self._size
        self._size += memoryview(data).nbytes
        return self._path, base

    def close(self) -> None:
        """Close the file (its references stay valid: the file stays until the job ends)."""
        if self._file is not None:
            self._file.close()
            self._file = None


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
        """The chunk, read back from its spill file (an OSError if the file does not hold it)."""
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


def spill_chunk(writer: SpillWriter, chunk: Chunk) -> SpilledChunk:
    """Write a chunk's lines to `writer`'s spill file once; the reference to load it from."""
    table = np.array([(line.number, line.offset, line.oversized, line.input_end, len(line.data))
                      for line in chunk.lines], np.int64).reshape(-1, _LINE_FIELDS)
    data = b"".join([table.tobytes(), *(line.data for line in chunk.lines)])
    path, start = writer.write_bytes(data)
    return SpilledChunk(chunk.file_index, chunk.chunk_index, chunk.path, chunk.input_bytes, len(chunk.lines),
                        path, start, start + len(data))


def load_chunk(chunk: Chunk | SpilledChunk) -> Chunk:
    """A chunk, wherever it is."""
    return chunk.load() if isinstance(chunk, SpilledChunk) else chunk


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


def _available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes; 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def likely_cached(spill_dir: str) -> bool:
    """Whether the spill files of `spill_dir` are on a local disk and small enough to be in the page cache."""
    try:
        total = sum(entry.stat().st_size for entry in os.scandir(spill_dir) if entry.is_file())
    except OSError:
        return False
    return localfs.is_local_disk(spill_dir) and total <= CACHED_SHARE * _available_memory()


class PiecePool:
    """Buffers for `ordered_pieces` that come back once written (`publish(..., release=pool.give)`).

    A shard's ~130 pieces of 4 MB then reuse the few buffers in flight instead of each touching
    fresh memory: where memory is backed lazily (a VM's, first touched page by page) that can be
    most of the gather's time, and malloc's arenas no longer keep the freed pieces. A buffer is
    handed out again only after `give`; without it (or with more in flight) a new one is made.
    """

    def __init__(self):
        self._free: list[np.ndarray] = []
        self._ours: dict[int, np.ndarray] = {}  # every buffer made, held: an id here is never reused
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of `nbytes`, from a returned buffer when one is large enough."""
        with self._lock:
            for i, buffer in enumerate(self._free):
                if len(buffer) >= nbytes:
                    return self._free.pop(i)[:nbytes]
            buffer = np.empty(nbytes, np.uint8)
            self._ours[id(buffer)] = buffer
            return buffer

    def give(self, part) -> None:
        """Take back the buffer of a piece (a memoryview of what `take` gave) now nobody reads it."""
        array = part.obj if isinstance(part, memoryview) else part
        buffer = array.base if isinstance(array, np.ndarray) and array.base is not None else array
        with self._lock:
            if self._ours.get(id(buffer)) is buffer and not any(b is buffer for b in self._free):
                self._free.append(buffer)


def ordered_pieces(blocks: list[tuple[np.ndarray, SpilledRecords]], count: int, record_bytes: int,
                   piece_bytes: int = GATHER_PIECE_BYTES, pool: PiecePool | None = None) -> Iterator[memoryview]:
    """The records of `blocks` ((places, records) pairs) in place order, in pieces, read from the spill files.

    `record_bytes`: the size of (nearly) every record, gathered with one numpy copy a piece; others
    are copied one by one. The places must be 0 .. count - 1, each once (SpoolError otherwise: a
    shard with a record missing or twice must never be written). Each piece is a buffer of its own
    (it stays valid after the next is taken: `publish(..., parts_kept=True)`), from `pool` when
    given (whose `give` the consumer calls once done with a piece).
    """
    if any(len(p) != len(r) for p, r in blocks):
        raise SpoolError("a block's places and records differ in number")
    blocks = [(np.asarray(p, np.int64), r) for p, r in blocks if len(r)]
    paths = sorted({r.path for _, r in blocks})
    index = {path: i for i, path in enumerate(paths)}
    none = [np.zeros(0, np.int64)]
    places = np.concatenate([p for p, _ in blocks] or none)
    starts = np.concatenate([r.starts.astype(np.int64) for _, r in blocks] or none)
    sizes = np.concatenate([(r.ends - r.starts).astype(np.int64) for _, r in blocks] or none)
    file_of = np.concatenate([np.full(len(r), index[r.path], np.int64) for _, r in blocks] or none)
    order = np.argsort(places, kind="stable")
    if not np.array_equal(places[order], np.arange(count)):
        raise SpoolError(f"{len(places)} records for the {count} places of a shard, not each place once")
    maps = []
    try:
        for path in paths:
            with open(path, "rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        yield from _gather_mapped(maps, file_of[order], starts[order], sizes[order], record_bytes,
                                  max(1, piece_bytes // max(1, record_bytes)), pool)
    finally:
        for m in maps:
            m.close()


def _gather_mapped(maps: list[mmap.mmap], file_of: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                   record_bytes: int, per_piece: int, pool: PiecePool | None = None) -> Iterator[memoryview]:
    for i, m in enumerate(maps):
        mine = file_of == i
        if mine.any() and int((starts[mine] + sizes[mine]).max()) > len(m):
            raise OSError(f"spill file {i} is shorter than its records")
    item = np.dtype((np.void, record_bytes))
    # Each file (and each piece) seen as overlapping items of record_bytes starting at every byte:
    # one numpy copy moves whole records between any offsets.
    views = [np.ndarray((max(0, len(m) - record_bytes + 1),), item, buffer=m, strides=(1,)) for m in maps]
    try:
        for lo in range(0, len(starts), per_piece):
            hi = min(len(starts), lo + per_piece)
            where, at, size = file_of[lo:hi], starts[lo:hi], sizes[lo:hi]
            offsets = np.cumsum(size) - size
            piece = pool.take(int(size.sum())) if pool is not None else np.empty(int(size.sum()), np.uint8)
            slots = np.ndarray((max(0, len(piece) - record_bytes + 1),), item, buffer=piece, strides=(1,))
            usual = size == record_bytes
            for i, view in enumerate(views):
                mine = usual & (where == i)
                slots[offsets[mine]] = view[at[mine]]
            for k in np.flatnonzero(~usual).tolist():
                m, a, n = maps[int(where[k])], int(at[k]), int(size[k])
                piece[offsets[k]:offsets[k] + n] = np.frombuffer(m, np.uint8, n, a)
            del slots
            yield memoryview(piece)
    finally:
        views.clear()
