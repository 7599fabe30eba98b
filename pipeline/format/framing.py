"""TFRecord framing done where records are made, and blocks of framed records as Beam elements.

A TFRecord file is records back to back, each framed as

    uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked CRC-32C of data

where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32), as TensorFlow's
`tsl/lib/hash/crc32c.h` defines it. Records are framed by the workers that tokenize, in parallel,
so a shard writer only copies bytes. A block carries many framed records back
to back in one bytes object: through a shuffle that is one element and one memory copy instead of
thousands of small objects to decode and re-encode (on DirectRunner every such pass goes through the
driver process).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Iterator

import google_crc32c
import numpy as np

from pipeline.core.packing import segment_features
from pipeline.format.records import serialize_example

_MASK_DELTA = 0xA282EAD8
HEADER_BYTES = 12  # length + its CRC
FOOTER_BYTES = 4  # the data's CRC


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One record as it appears in a TFRecord file."""
    length = struct.pack("<Q", len(record))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), record,
                     struct.pack("<I", masked_crc32c(record))))


def framed_size(payload_bytes: int) -> int:
    """Bytes a record of `payload_bytes` takes in a TFRecord file."""
    return HEADER_BYTES + payload_bytes + FOOTER_BYTES


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
        return self.data[start + HEADER_BYTES : end - FOOTER_BYTES]

    def take(self, indices: Iterable[int]) -> FramedRecords:
        """A new block of the records at `indices`, in that order."""
        parts = [self.framed(i) for i in indices]
        return FramedRecords(b"".join(parts), np.cumsum([len(p) for p in parts], dtype=np.int64))

    def parts(self, order: Iterable[int] | None = None) -> Iterator[memoryview]:
        """The framed records (in `order` if given), ready to be written one after another."""
        for i in range(len(self)) if order is None else order:
            yield self.framed(i)


def serialize_records(
    tokens: np.ndarray,
    starts: np.ndarray,
    *,
    dtype: np.dtype,
    document_boundaries: bool,
    valid_labels: int | None = None,
) -> FramedRecords:
    """Serialize and frame packed records ([k, seq_len + 1] tokens, [k, seq_len] segment starts)."""
    tokens = np.atleast_2d(tokens).astype(dtype)
    seg = pos = None
    if document_boundaries:
        seg, pos = segment_features(starts, valid_labels)
        seg, pos = seg.astype(dtype), pos.astype(dtype)
    return FramedRecords.of(
        serialize_example(
            tokens[i],
            None if seg is None else seg[i],
            None if pos is None else pos[i],
            valid_labels,
            dtype,
        )
        for i in range(len(tokens))
    )


def record_bytes(seq_len: int, dtype: np.dtype, document_boundaries: bool) -> int:
    """Framed size of every full record of an output (they all have the same size)."""
    probe = serialize_records(np.zeros((1, seq_len + 1), np.int32), np.ones((1, seq_len), bool),
                              dtype=dtype, document_boundaries=document_boundaries)
    return len(probe.data)
