"""Where each block of records starts in the job's global record order: the shard plan's side input.

Records come in blocks, one per *source* `(kind, copy, file_index, chunk_index)` (kind 0: a chunk's
records, 1: a file's joined tails, 2: the job's last records). The global index of a record is its
source's offset (the records of every smaller source, in tuple order) plus its index in the block.

`SourceOffsets` keeps the sources as one sorted int64 array of packed keys (the packing keeps the
tuple order) and their offsets as another: ~16 bytes per source, decoded in microseconds. The full
Pile has a few hundred thousand sources; as a dict of tuples that side input would cost every
bundle ~100 MB of Python objects to decode.

    >>> table = SourceOffsets.from_counts([((0, 0, 1, 0), 5), ((0, 0, 0, 1), 3), ((2, 0, 0, 0), 1)])
    >>> table.offset((0, 0, 1, 0)), table.num_records
    (3, 9)
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Bits per field, most significant first: kind, epoch copy, input file, chunk of the file.
_FIELDS = (("kind", 2), ("copy", 8), ("file_index", 22), ("chunk_index", 31))


def source_key(source: tuple[int, int, int, int]) -> int:
    """One non-negative int64 per source; keys compare as the tuples do."""
    key = 0
    for value, (name, bits) in zip(source, _FIELDS, strict=True):
        if not 0 <= value < 1 << bits:
            raise ValueError(f"source {source}: {name} {value} is outside [0, 2**{bits})")
        key = (key << bits) | value
    return key


@dataclasses.dataclass(frozen=True, eq=False)
class SourceOffsets:
    """Sorted source keys and the global index of each source's first record."""

    keys: np.ndarray  # int64, sorted
    offsets: np.ndarray  # int64, offsets[i] = records of all sources before keys[i]
    num_records: int

    @classmethod
    def from_counts(cls, counts) -> SourceOffsets:
        """From (source, number of records) pairs, in any order (each source once)."""
        counts = list(counts)
        keys = np.array([source_key(s) for s, _ in counts], np.int64)
        sizes = np.array([n for _, n in counts], np.int64)
        order = np.argsort(keys, kind="stable")
        keys, sizes = keys[order], sizes[order]
        if len(keys) and (keys[1:] == keys[:-1]).any():
            raise ValueError("a record source is counted twice")
        offsets = np.zeros(len(keys), np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        return cls(keys, offsets, int(sizes.sum()))

    def offset(self, source: tuple[int, int, int, int]) -> int:
        """Global index of the first record of `source` (KeyError for a source never counted)."""
        key = source_key(source)
        i = int(np.searchsorted(self.keys, key))
        if i == len(self.keys) or self.keys[i] != key:
            raise KeyError(f"record source {source} was not counted")
        return int(self.offsets[i])
