"""Put a group's items back in order through local disk, holding a few MB whatever the group's size.

A writer receives a group (one output shard) as items in whatever order the runner delivers them,
and must write them in the order of their *place*: for a TFRecord shard, a record's permuted
position minus the shard's first; for a Megatron shard or a dead-letter file, a document's or a
chunk's index. `OrderedSpool` takes the group in one pass and puts every item into one of B local
bucket files, bucket = place * B // num_places, each item written as

    uint32 place | uint32 size | size bytes

then yields the items bucket by bucket, each bucket read whole and sorted by place. Buckets hold
about `bucket_bytes` each (8 MiB), so the writer's memory is one item of the group (one block, as
the runner hands it over) plus one bucket, independent of the group's size; every disk access is
sequential (a cloud VM's disk does a few hundred random reads a second, so reading a 1 GiB shard
back record by record could take minutes). Local disk needed: the group's bytes once.

    >>> with OrderedSpool(3, total_bytes=6) as spool:
    ...     for place, item in ((2, b"cc"), (0, b"aa"), (1, b"bb")):
    ...         spool.add(place, item)
    ...     b"".join(spool)
    b'aabbcc'

Missing, repeated or out-of-range places raise `SpoolError`: a shard with a record missing or twice
must never be written.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Iterator

import numpy as np

BUCKET_BYTES = 8 << 20
MAX_BUCKETS = 512  # open files per spool; past 4 GiB groups the buckets grow instead
_HEADER = struct.Struct("<II")


class SpoolError(RuntimeError):
    """A group whose places do not match what the writer expects (missing, repeated, out of range)."""


class OrderedSpool:
    """Items of one group, added in any order with their place, read back in place order.

    num_places: places are 0 .. num_places - 1. dense: every place must be added exactly once (a
    shard), otherwise each at most once (dead letters: only chunks with bad lines). total_bytes: an
    estimate of the group's size, to choose the number of buckets. directory: where the bucket files
    go (default: the system's temporary directory, $TMPDIR).
    """

    def __init__(self, num_places: int, total_bytes: int, *, dense: bool = True, directory: str | None = None,
                 bucket_bytes: int = BUCKET_BYTES):
        if num_places < 0 or num_places >= 1 << 32:
            raise ValueError(f"num_places must be in [0, 2**32), got {num_places}")
        self._n = num_places
        self._dense = dense
        self._buckets = min(MAX_BUCKETS, max(1, num_places), max(1, -(-total_bytes // bucket_bytes)))
        self._dir = tempfile.mkdtemp(prefix="pile-pipeline-spool-", dir=directory)
        self._files: dict[int, object] = {}
        self._added = 0

    def __len__(self) -> int:
        """Items added so far."""
        return self._added

    def _bucket(self, place: int) -> int:
        return place * self._buckets // self._n

    def add(self, place: int, item) -> None:
        """Add one item (bytes-like) at `place`."""
        if not 0 <= place < self._n:
            raise SpoolError(f"place {place} is outside [0, {self._n})")
        bucket = self._bucket(place)
        f = self._files.get(bucket)
        if f is None:
            f = self._files[bucket] = open(os.path.join(self._dir, f"{bucket:05d}"), "wb")  # noqa: SIM115
        f.write(_HEADER.pack(place, len(item)))
        f.write(item)
        self._added += 1

    def __iter__(self) -> Iterator[bytes]:
        """The items in place order."""
        if self._dense and self._added != self._n:
            raise SpoolError(f"{self._added} items for {self._n} places")
        for f in self._files.values():
            f.close()
        for bucket in range(self._buckets):
            path = os.path.join(self._dir, f"{bucket:05d}")
            if not os.path.exists(path):
                if self._dense and self._places_of(bucket).size:
                    raise SpoolError(f"no item for places {self._places_of(bucket)[0]}..")
                continue
            with open(path, "rb") as f:
                data = memoryview(f.read())
            os.remove(path)
            places, starts, ends = _parse(data)
            order = np.argsort(places, kind="stable")
            places = places[order]
            if len(places) and (places[1:] == places[:-1]).any():
                raise SpoolError(f"place {int(places[1:][places[1:] == places[:-1]][0])} added twice")
            if self._dense and not np.array_equal(places, self._places_of(bucket)):
                raise SpoolError(f"places of bucket {bucket} do not cover its range")
            for i in order.tolist():
                yield bytes(data[starts[i]:ends[i]])  # a copy: no item keeps its bucket alive
            del data

    def _places_of(self, bucket: int) -> np.ndarray:
        """The places that fall in `bucket` (bucket = place * B // n)."""
        lo = -(-bucket * self._n // self._buckets)
        hi = -(-(bucket + 1) * self._n // self._buckets)
        return np.arange(lo, hi, dtype=np.int64)

    def close(self) -> None:
        """Remove the bucket files."""
        for f in self._files.values():
            f.close()
        self._files.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> OrderedSpool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _parse(data: memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(places, item starts, item ends) of a bucket file's bytes."""
    places, starts, ends = [], [], []
    i = 0
    while i < len(data):
        if i + _HEADER.size > len(data):
            raise SpoolError("a spool bucket file is cut short")
        place, size = _HEADER.unpack_from(data, i)
        i += _HEADER.size
        if i + size > len(data):
            raise SpoolError("a spool bucket file is cut short")
        places.append(place)
        starts.append(i)
        i += size
        ends.append(i)
    return np.array(places, np.int64), np.array(starts, np.int64), np.array(ends, np.int64)
