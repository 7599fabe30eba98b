"""On one machine, records go from the tokenizing workers to the shard writers through local files.

DirectRunner keeps every shuffle in its driver process: each record block that goes to
GroupByShard is sent from a worker to the driver, held there, and sent back to the worker that
writes the shard: the driver's memory grows with the input, and every byte crosses a socket twice.
When all workers share a filesystem with the driver, the producers append their framed blocks to
a spill file of their own instead and emit a small `SpilledRecords` reference; only references go
through the shuffle, and the shard writer reads the bytes back (from the page cache, mostly).
The bytes written to the shards are the same either way, and the writer reads each record once,
so neither the driver nor a writer holds a shard's records in memory. The writer reads them into
its spool (pipeline/io/spool.py), which turns random reads into sequential ones, unless the spill
files are on a local disk and small enough beside the free memory to be in the page cache still:
then `ordered_pieces` gathers the shard straight from them in order (mapped into memory), one copy
instead of three, with no second pass through the disk (the larger part of the writer's work, and
of the time it adds after the last input is tokenized).

With --dedup or --decontaminate the read chunks meet their removed documents' records in a
CoGroupByKey; with a spill directory each chunk's lines go to a spill file once, as the chunk is
read, and only a `SpilledChunk` reference crosses the join: the tokenizing stage loads the chunk
back (one chunk at a time) instead of the driver holding all the text.

The spill directory is hidden inside a local output directory (so it needs no other disk, and an
`--overwrite` run removes what a killed run left) and removed when the job ends. On a remote output
(s3://) it is a local temporary directory.
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator

import fsspec
import numpy as np

from pipeline.format.framing import FramedRecords
from pipeline.io import localfs
from pipeline.io.inputs import Chunk
from pipeline.io.publish import publish, temp_name, write_failure
from pipeline.io.record_files import SpilledChunk, SpilledRecords, spill_chunk, spillable
from pipeline.io.sinks import RecordSink
from pipeline.io.spool import SpoolError
from pipeline.io.urls import is_local

LOG = logging.getLogger(__name__)
# Spill bytes up to this share of the available memory are taken to be still cached. The mapped
# files count in the writer's RSS (a fault maps the page cache's whole folio, up to 2 MB, around a
# record), clean pages the kernel can reclaim: this share also bounds that.
CACHED_SHARE = 0.25
GATHER_PIECE_BYTES = 4 << 20


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
    fresh memory: where memory is backed lazily (a VM's) touching it first is most of the gather's
    time, and malloc's arenas no longer keep the freed pieces. A buffer is
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


class SpillSink(RecordSink):
    """Blocks and chunks appended to a spill file of this copy's own in a local directory (one machine)."""

    def __init__(self, spill_dir: str):
        self.spill_dir = spill_dir
        self._writer: SpillWriter | None = None

    def __getstate__(self):
        return {"spill_dir": self.spill_dir, "_writer": None}

    def _spill(self) -> SpillWriter:
        if self._writer is None:
            self._writer = SpillWriter(self.spill_dir)
        return self._writer

    def put(self, block: FramedRecords, name: str) -> SpilledRecords:
        """A reference to the block, appended to this copy's spill file."""
        return self._spill().write(block)

    def put_chunk(self, chunk: Chunk) -> Chunk | SpilledChunk:
        """A reference to the chunk's lines in the spill file; a chunk with a columnar row goes on as it is."""
        return spill_chunk(self._spill(), chunk) if spillable(chunk) else chunk

    def publish_gathered(self, path: str, blocks: list, count: int, record_bytes: int) -> tuple[int, str] | None:
        """The shard gathered straight from the spill files while they are likely in the page cache (else None)."""
        if not likely_cached(self.spill_dir):
            return None
        pool = PiecePool()
        # The shard is written once and read elsewhere: by direct I/O where the disk allows it.
        return publish(path, ordered_pieces(blocks, count, record_bytes, pool=pool), parts_kept=True,
                       release=pool.give, direct_io=True)

    def close(self) -> None:
        """Close this copy's spill file (its references stay valid until the job ends)."""
        if self._writer is not None:
            self._writer.close()
