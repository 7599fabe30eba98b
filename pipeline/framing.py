"""TFRecord framing done where records are made, and blocks of framed records as Beam elements.

Records are framed (length, masked CRC-32C of it, data, masked CRC-32C of that) by the workers that
tokenize, in parallel, so a shard writer only copies bytes. A block carries many framed records back
to back in one bytes object: through a shuffle that is one element and one memory copy instead of
thousands of small objects to decode and re-encode (on DirectRunner every such pass goes through the
driver process).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np
from apache_beam.io.tfrecordio import _TFRecordUtil


class _Collect(list):
    write = list.append


def frame(record: bytes) -> bytes:
    """One record as it appears in a TFRecord file (framing by Beam's TFRecord writer)."""
    out = _Collect()
    _TFRecordUtil.write_record(out, record)
    return b"".join(out)


@dataclasses.dataclass(frozen=True, eq=False)
class FramedRecords:
    """Framed records back to back: record i is data[ends[i - 1]:ends[i]] (ends: int64, cumulative)."""

    data: bytes
    ends: np.ndarray

    @classmethod
    def of(cls, records: Iterable[bytes]) -> FramedRecords:
        """Frame serialized records into one block."""
        framed = [frame(r) for r in records]
        return cls(b"".join(framed), np.cumsum([len(f) for f in framed], dtype=np.int64))

    @classmethod
    def concat(cls, blocks: Iterable[FramedRecords]) -> FramedRecords:
        """The records of several blocks, in order, as one block."""
        blocks = [b for b in blocks if len(b)]
        if not blocks:
            return cls(b"", np.zeros(0, np.int64))
        shifts = np.cumsum([0] + [len(b.data) for b in blocks[:-1]])
        ends = np.concatenate([b.ends + shift for b, shift in zip(blocks, shifts, strict=True)])
        return cls(b"".join(b.data for b in blocks), ends)

    def __len__(self) -> int:
        return len(self.ends)

    def _bounds(self, i: int) -> tuple[int, int]:
        return (int(self.ends[i - 1]) if i else 0), int(self.ends[i])

    def framed(self, i: int) -> memoryview:
        """Record i with its framing, as written to a file."""
        start, end = self._bounds(i)
        return memoryview(self.data)[start:end]

    def payload(self, i: int) -> bytes:
        """Record i without its framing (the serialized tf.train.Example)."""
        start, end = self._bounds(i)
        return self.data[start + 12 : end - 4]  # 8-byte length + 4-byte CRC before, 4-byte CRC after

    def take(self, indices: Iterable[int]) -> FramedRecords:
        """A new block of the records at `indices`, in that order."""
        parts = [self.framed(i) for i in indices]
        return FramedRecords(b"".join(parts), np.cumsum([len(p) for p in parts], dtype=np.int64))

    def parts(self, order: Iterable[int] | None = None) -> Iterator[memoryview]:
        """The framed records (in `order` if given), ready to be written one after another."""
        for i in range(len(self)) if order is None else order:
            yield self.framed(i)
