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
import functools
import struct
from collections.abc import Iterable, Iterator

import google_crc32c
import numpy as np

from pipeline.core.packing import segment_features
from pipeline.format.layout import FOOTER_BYTES, HEADER_BYTES  # the frame's sizes: the reader's, one home
from pipeline.format.records import serialize_example

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One record as it appears in a TFRecord file."""
    length = struct.pack("<Q", len(record))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), record,
                     struct.pack("<I", masked_crc32c(record))))


@dataclasses.dataclass(frozen=True, eq=False)
class FramedRecords:
    """Framed records back to back: record i is data[ends[i - 1]:ends[i]] (ends: int64, cumulative).

    data: bytes, or the bytearray a block was filled in (never changed after).
    """

    data: bytes | bytearray
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

    def __reduce__(self):
        # Through a shuffle without spill files the block is pickled: as bytes, which every pickle
        # protocol writes without an extra copy and reads back without one (a bytearray costs both).
        return FramedRecords, (bytes(self.data), self.ends)

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
    tokens = np.atleast_2d(tokens)
    dtype = np.dtype(dtype)
    seg = pos = None
    if document_boundaries:
        seg, pos = segment_features(starts, valid_labels)
    if valid_labels is not None:  # the one padded record of a job: its own layout, one at a time
        return FramedRecords.of(
            serialize_example(tokens[i], None if seg is None else seg[i], None if pos is None else pos[i],
                              valid_labels, dtype)
            for i in range(len(tokens))
        )
    return _serialize_full(tokens, seg, pos, dtype)


def serialize_packed(tokens: np.ndarray, segment_ids: np.ndarray, positions: np.ndarray, *,
                     dtype: np.dtype) -> FramedRecords:
    """Serialize and frame best-fit records ([k, seq_len + 1] tokens, [k, seq_len] segment ids, positions).

    Segment id 0 marks padding (pipeline/core/best_fit.py); every record has the same size.
    """
    tokens = np.atleast_2d(tokens)
    return _serialize_full(tokens, np.atleast_2d(segment_ids), np.atleast_2d(positions), np.dtype(dtype))


def _serialize_full(tokens: np.ndarray, seg: np.ndarray | None, pos: np.ndarray | None,
                    dtype: np.dtype) -> FramedRecords:
    """Full-size records (no valid_labels), with segment ids and positions or neither."""
    document_boundaries = seg is not None
    if not len(tokens):
        return FramedRecords(b"", np.zeros(0, np.int64))
    layout = _layout(tokens.shape[1], dtype, document_boundaries)
    k, size = len(tokens), layout.framed_bytes
    # Every record of a block has the same bytes around its arrays: the template's bytes between
    # the slots into each row, the arrays into their slots, then one CRC per record (in C, no
    # per-byte Python). The block is filled in place in the bytearray it is handed on as: each
    # byte is written once, and no copy is made of the whole.
    data = bytearray(k * size)
    out = np.frombuffer(data, np.uint8).reshape(k, size)
    for start, stop in layout.gaps:
        out[:, start:stop] = layout.template[start:stop]
    for (start, stop), values in zip(layout.slots, (tokens, seg, pos), strict=False):
        out[:, start:stop].view(dtype.newbyteorder("<"))[:] = values
    # One CRC call per record (over a row view: no Python arithmetic or element write per record),
    # then all of them masked at once, in uint32 arithmetic, which wraps as the mask needs.
    crcs = np.fromiter(map(google_crc32c.value, out[:, HEADER_BYTES : size - FOOTER_BYTES]), np.uint32, k)
    masked = ((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(_MASK_DELTA)
    out[:, size - FOOTER_BYTES:].view("<u4")[:, 0] = masked
    return FramedRecords(data, np.arange(1, k + 1, dtype=np.int64) * size)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where a full record's arrays lie in its framed bytes: (start, stop) of tokens, segment ids, positions."""

    template: np.ndarray  # uint8, the framed record with zero arrays
    slots: tuple[tuple[int, int], ...]

    @property
    def framed_bytes(self) -> int:
        return len(self.template)

    @property
    def gaps(self) -> list[tuple[int, int]]:
        """(start, stop) of the template's bytes around the slots: framing and protobuf headers."""
        bounds = [0, *(b for slot in sorted(self.slots) for b in slot), self.framed_bytes]
        return [(a, b) for a, b in zip(bounds[::2], bounds[1::2], strict=True) if b > a]


@functools.lru_cache(maxsize=16)
def _layout(width: int, dtype: np.dtype, document_boundaries: bool) -> _Layout:
    # Found by serializing the reference encoder twice with one array's bytes changed: the bytes
    # that differ are that array's slot, whatever the proto's headers look like.
    shapes = [(1, width)] + [(1, width - 1)] * (2 * document_boundaries)

    def framed(changed: int | None) -> np.ndarray:
        arrays = [np.full(shape, -1 if i == changed else 0, np.int64).astype(dtype) for i, shape in enumerate(shapes)]
        return np.frombuffer(frame(serialize_example(*(a[0] for a in arrays), dtype=dtype)), np.uint8)

    template = framed(None)
    slots = []
    for i in range(len(shapes)):
        where = np.flatnonzero(framed(i)[HEADER_BYTES:-FOOTER_BYTES] != template[HEADER_BYTES:-FOOTER_BYTES])
        start, stop = HEADER_BYTES + int(where[0]), HEADER_BYTES + int(where[-1]) + 1
        if stop - start != shapes[i][1] * dtype.itemsize:
            raise AssertionError(f"record layout: array {i} does not occupy one contiguous slot")
        slots.append((start, stop))
    return _Layout(template, tuple(slots))


def record_bytes(seq_len: int, dtype: np.dtype, document_boundaries: bool) -> int:
    """Framed size of every full record of an output (they all have the same size)."""
    probe = serialize_records(np.zeros((1, seq_len + 1), np.int32), np.ones((1, seq_len), bool),
                              dtype=dtype, document_boundaries=document_boundaries)
    return len(probe.data)
