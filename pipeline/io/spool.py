"""Put a group's items back in order through local disk, holding a few MB whatever the group's size.

A writer receives a group (one output shard) as items in whatever order the runner delivers them,
and must write them in the order of their *place*: for a TFRecord shard, a record's permuted
position minus the shard's first. `OrderedSpool` takes the group in one pass and puts every item
into one of B local bucket files, bucket = place * B // num_places. Only the items' bytes go to
disk; each bucket's places and item sizes stay in memory (8 bytes an item: 8 MB for the million
1 KB records of a 1 GiB shard), so reading a bucket back needs no parsing. Items come in batches
(`add_many`: a block of records, bucketed with numpy, one write per bucket it touches) or one at a
time (`add`).

Reading back goes bucket by bucket: a bucket is read whole, its items put in place order with one
numpy gather when they all have the same size, and handed out as pieces of up to `PIECE_BYTES`.
Buckets hold about `bucket_bytes` each (8 MiB), so the writer's memory is one batch (one block, as
the runner hands it over), one bucket and those 8 bytes an item, independent of the group's size;
every disk access is sequential (a cloud VM's disk does a few hundred random reads a second, so
reading a 1 GiB shard back record by record could take minutes). Local disk needed: the group's
bytes once.

    >>> with OrderedSpool(3, total_bytes=6) as spool:
    ...     for place, item in ((2, b"cc"), (0, b"aa"), (1, b"bb")):
    ...         spool.add(place, item)
    ...     b"".join(spool)
    b'aabbcc'

Missing, repeated or out-of-range places raise `SpoolError`: a shard with a record missing or twice
must never be written. Every runner's shard writer uses it, except where its sink gathers a shard
straight from its own files (`RecordSink.publish_gathered`: DirectRunner's, when they are cached).
"""

from __future__ import annotations

import array
import os
import shutil
import tempfile
from collections.abc import Iterator

import numpy as np

BUCKET_BYTES = 8 << 20
PIECE_BYTES = 256 << 10  # what iteration yields at a time: large enough that per-piece costs vanish
MAX_BUCKETS = 512  # open files per spool; past 4 GiB groups the buckets grow instead


class SpoolError(RuntimeError):
    """A group whose places do not match what the writer expects (missing, repeated, out of range)."""


class _Bucket:
    """One bucket file and, in memory, the places and sizes of its items in file order."""

    def __init__(self, path: str):
        self.path = path
        self.file = open(path, "wb")  # noqa: SIM115 -- open until the spool is read or closed
        self.places = array.array("I")  # uint32: places are < 2**32, items < 4 GiB
        self.sizes = array.array("I")


class OrderedSpool:
    """Items of one group, added in any order with their place, read back in place order.

    num_places: places are 0 .. num_places - 1. dense: every place must be added exactly once (a
    shard), otherwise each at most once. total_bytes: an estimate of the group's size, to choose
    the number of buckets. directory: where the bucket files go (default: the system's temporary
    directory, $TMPDIR).
    """

    def __init__(self, num_places: int, total_bytes: int, *, dense: bool = True, directory: str | None = None,
                 bucket_bytes: int = BUCKET_BYTES):
        if num_places < 0 or num_places >= 1 << 32:
            raise ValueError(f"num_places must be in [0, 2**32), got {num_places}")
        self._n = num_places
        self._dense = dense
        self._buckets = min(MAX_BUCKETS, max(1, num_places), max(1, -(-total_bytes // bucket_bytes)))
        self._dir = tempfile.mkdtemp(prefix="pile-pipeline-spool-", dir=directory)
        self._files: dict[int, _Bucket] = {}
        self._added = 0

    def __len__(self) -> int:
        """Items added so far."""
        return self._added

    def _bucket_file(self, bucket: int) -> _Bucket:
        f = self._files.get(bucket)
        if f is None:
            f = self._files[bucket] = _Bucket(os.path.join(self._dir, f"{bucket:05d}"))
        return f

    def add(self, place: int, item) -> None:
        """Add one item (bytes-like) at `place`."""
        if not 0 <= place < self._n:
            raise SpoolError(f"place {place} is outside [0, {self._n})")
        size = memoryview(item).nbytes
        if size >= 1 << 32:
            raise ValueError(f"an item of {size} bytes: the spool takes items under 4 GiB")
        f = self._bucket_file(place * self._buckets // self._n)
        f.file.write(item)
        f.places.append(place)
        f.sizes.append(size)
        self._added += 1

    def add_many(self, places, data, starts, ends) -> None:
        """Add items data[starts[i]:ends[i]] at places[i] (data: bytes-like; the rest: integer arrays)."""
        places = np.asarray(places, np.int64)
        starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        if not places.shape == starts.shape == ends.shape or places.ndim != 1:
            raise ValueError(f"{places.shape} places for {starts.shape} starts and {ends.shape} ends")
        if not len(places):
            return
        outside = (places < 0) | (places >= self._n)
        if outside.any():
            raise SpoolError(f"place {int(places[outside][0])} is outside [0, {self._n})")
        data = np.frombuffer(data, np.uint8)
        sizes = ends - starts
        if sizes.min() < 0 or starts.min() < 0 or ends.max() > len(data):
            raise ValueError(f"item bounds outside the {len(data)} bytes of data")
        if sizes.max() >= 1 << 32:
            raise ValueError(f"an item of {int(sizes.max())} bytes: the spool takes items under 4 GiB")
        buckets = places * self._buckets // self._n
        order = np.argsort(buckets, kind="stable")
        buckets, places, starts, sizes = buckets[order], places[order], starts[order], sizes[order]
        cuts = np.flatnonzero(np.diff(buckets)) + 1
        items = _gather(data, starts, sizes)  # every item, grouped by bucket
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(places)], strict=True):
            f = self._bucket_file(int(buckets[lo]))
            f.file.write(items[offsets[lo]:offsets[hi]])
            f.places.frombytes(places[lo:hi].astype(np.uint32).tobytes())
            f.sizes.frombytes(sizes[lo:hi].astype(np.uint32).tobytes())
        self._added += len(places)

    def __iter__(self) -> Iterator[bytes]:
        """The items in place order, concatenated, as pieces of up to PIECE_BYTES (one item if larger)."""
        if self._dense and self._added != self._n:
            raise SpoolError(f"{self._added} items for {self._n} places")
        for f in self._files.values():
            f.file.close()
        for bucket in range(self._buckets):
            f = self._files.get(bucket)
            if f is None:
                if self._dense and self._places_of(bucket).size:
                    raise SpoolError(f"no item for places {self._places_of(bucket)[0]}..")
                continue
            places = np.frombuffer(f.places, np.uint32).astype(np.int64)
            sizes = np.frombuffer(f.sizes, np.uint32).astype(np.int64)
            order = np.argsort(places, kind="stable")
            sorted_places = places[order]
            repeated = sorted_places[1:] == sorted_places[:-1]
            if repeated.any():
                raise SpoolError(f"place {int(sorted_places[1:][repeated][0])} added twice")
            if self._dense and not np.array_equal(sorted_places, self._places_of(bucket)):
                raise SpoolError(f"places of bucket {bucket} do not cover its range")
            data = np.fromfile(f.path, np.uint8)
            os.remove(f.path)
            if len(data) != sizes.sum():
                raise SpoolError(f"a spool bucket file holds {len(data)} bytes, not {int(sizes.sum())}")
            starts = np.cumsum(sizes) - sizes
            yield from _pieces(data, starts[order], sizes[order])
            del data

    def _places_of(self, bucket: int) -> np.ndarray:
        """The places that fall in `bucket` (bucket = place * B // n)."""
        lo = -(-bucket * self._n // self._buckets)
        hi = -(-(bucket + 1) * self._n // self._buckets)
        return np.arange(lo, hi, dtype=np.int64)

    def close(self) -> None:
        """Remove the bucket files."""
        for f in self._files.values():
            f.file.close()
        self._files.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> OrderedSpool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _gather(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The items data[starts[i]:starts[i] + sizes[i]] back to back, as one uint8 array."""
    if len(sizes) and sizes[0] > 0 and (sizes == sizes[0]).all():
        # Equal sizes (a shard's records): one numpy copy, each item an opaque value of `size` bytes
        # starting at any byte of `data`.
        size = int(sizes[0])
        items = np.ndarray((len(data) - size + 1,), np.dtype((np.void, size)), buffer=data, strides=(1,))
        return items[starts].view(np.uint8)
    view = memoryview(data)
    return np.frombuffer(b"".join([view[s:s + n] for s, n in zip(starts.tolist(), sizes.tolist(), strict=True)]),
                         np.uint8)


def _pieces(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> Iterator[bytes]:
    """The items of `data` at (starts, sizes), back to back, in pieces of about PIECE_BYTES."""
    ends = np.cumsum(sizes)
    first = 0
    while first < len(sizes):
        # Items up to PIECE_BYTES past the piece's start, at least one.
        last = max(first + 1, int(np.searchsorted(ends, ends[first] - sizes[first] + PIECE_BYTES, "right")))
        yield _gather(data, starts[first:last], sizes[first:last]).tobytes()
        first = last
