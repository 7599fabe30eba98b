"""Where each record of a shard starts, from the manifest alone, and whether the manifest adds up.

Every full record of an output has the same framed size ``R`` (its token arrays have a fixed
length, so its `tf.train.Example` has too): record j of a shard starts at byte ``j * R``. The one
exception is the job's single padded record (``remainder=pad``), which also carries
``valid_labels`` and is ``extra`` bytes longer (a few bytes: the int64 feature). So a shard of
``n`` records is exactly ``n * R`` bytes, or ``n * R + extra`` for the shard that holds the padded
record, and record j of that shard starts at ``j * R + (extra if j > p else 0)`` where p is the
padded record's position. Size <-> count is arithmetic: a manifest whose record counts disagree
with its byte counts is refused before anything is read (`shard_layout`), and the file sizes are
then checked against the byte counts by the reader.

A best_fit output (`packing.mode`) has no such record: it pads inside its records (segment id 0), so
every one of its records is ``R`` bytes.

The padded record's position p is not in the manifest; `locate_padded` finds it with a binary search
over record headers (12 bytes each, ~log2(n) reads): a TFRecord header is a length and a masked
CRC-32C of it, so a header read at ``j * R`` is valid exactly for j <= p (after p the offset falls
inside the previous record). The CRC of 8 bytes is computed here in pure Python (no dependency).

Manifest consistency (`check_totals`): totals.records and totals.bytes equal the sums over shards;
the packing stats add up to the record count (records_from_chunks + records_from_tails +
padded_records); label_tokens = records * seq_len - padding_labels; shuffle.num_shards equals the
number of shards; and exactly `padded_records` shards carry the padded record's extra bytes.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

import numpy as np

from pipeline.format import records
from pipeline.format.manifest import ManifestError

HEADER_BYTES = 12  # uint64 length + uint32 masked CRC-32C of it
FOOTER_BYTES = 4  # uint32 masked CRC-32C of the data
_MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # Castagnoli, reflected
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C, in pure Python: for headers (8 bytes), not for record data."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def header_length(header: bytes) -> int | None:
    """The data length a 12-byte TFRecord header declares, or None when its CRC does not match."""
    if len(header) != HEADER_BYTES:
        return None
    length, crc = struct.unpack("<QI", header)
    return length if masked_crc32c(header[:8]) == crc else None


def payload_bytes(seq_len: int, dtype: np.dtype, document_boundaries: bool, valid_labels: int | None = None) -> int:
    """Serialized size of one record (without framing); every full record has this size."""
    width = np.zeros(seq_len, dtype)
    return len(records.serialize_example(
        np.zeros(seq_len + 1, dtype),
        width if document_boundaries else None,
        width if document_boundaries else None,
        valid_labels,
        dtype,
    ))


def padded_extras(seq_len: int, dtype: np.dtype, document_boundaries: bool) -> frozenset[int]:
    """The extra bytes the padded record can have (its valid_labels varint takes 1-3 bytes)."""
    full = payload_bytes(seq_len, dtype, document_boundaries)
    probes = [v for v in (1, 1 << 7, 1 << 14) if v < seq_len]
    return frozenset(payload_bytes(seq_len, dtype, document_boundaries, v) - full for v in probes)


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """Byte offsets of records in an output's shards.

    Attributes:
        record_bytes: framed size R of every full record.
        padded_shard: index of the shard holding the padded record, or -1 when there is none.
        padded_extra: how many bytes longer than R the padded record is (0 when there is none).
        padded_index: the padded record's position in its shard (-1: not located yet).
    """

    record_bytes: int
    padded_shard: int = -1
    padded_extra: int = 0
    padded_index: int = -1

    def offsets(self, shards, firsts) -> np.ndarray:
        """Byte offset where record `firsts[i]` of shard `shards[i]` starts (vectorized, int64)."""
        shards = np.asarray(shards, np.int64)
        firsts = np.asarray(firsts, np.int64)
        out = firsts * self.record_bytes
        if self.padded_shard >= 0:
            if self.padded_index < 0:
                raise ValueError("the padded record has not been located (locate_padded)")
            out = out + np.where((shards == self.padded_shard) & (firsts > self.padded_index), self.padded_extra, 0)
        return out


def _declares(features: dict, name: str) -> bool:
    return name in features


def shard_layout(manifest: dict, path: str) -> ShardLayout:
    """Check the manifest's shard record counts against their byte counts; the output's layout.

    Args:
        manifest: a loaded manifest.
        path: the manifest's location, for error messages.

    Returns:
        The layout, with the padded record's shard (its position is found by `locate_padded`).

    Raises:
        ManifestError: a shard's byte count is not its record count times the record size (plus
            the padded record's extra bytes for at most one shard), or the totals do not add up.
    """
    features = manifest.get("features") or {}
    tokens = features.get(records.TOKENS) or {}
    seq_len = int(manifest["seq_len"])
    dtype = {"uint16": np.dtype("<u2"), "int32": np.dtype("<i4")}.get(tokens.get("dtype"))
    if dtype is None:
        raise ManifestError(f"{path}: tokens dtype {tokens.get('dtype')!r}: expected uint16 or int32")
    boundaries = _declares(features, records.SEGMENT_IDS) and _declares(features, records.POSITIONS)
    if _declares(features, records.SEGMENT_IDS) != _declares(features, records.POSITIONS):
        raise ManifestError(f"{path}: features declare only one of segment_ids / positions")
    try:
        mode = records.packing_mode(manifest)
    except ValueError as e:
        raise ManifestError(f"{path}: {e}") from None
    size = payload_bytes(seq_len, dtype, boundaries) + HEADER_BYTES + FOOTER_BYTES
    # A best_fit output pads inside its records (segment id 0): none carries valid_labels.
    extras = frozenset() if mode == records.BEST_FIT else padded_extras(seq_len, dtype, boundaries)
    padded = []
    for index, shard in enumerate(manifest["shards"]):
        count, nbytes = int(shard["records"]), int(shard["bytes"])
        extra = nbytes - count * size
        if count < 0 or (extra != 0 and extra not in extras):
            raise ManifestError(
                f"{path}: shard {shard['path']} lists {count} records and {nbytes} bytes, but every "
                f"record of this output is {size} bytes (one padded record {sorted(extras)} bytes "
                "more): the manifest's counts do not match its shards"
            )
        if extra:
            padded.append((index, extra))
    if len(padded) > 1:
        names = ", ".join(manifest["shards"][i]["path"] for i, _ in padded)
        raise ManifestError(f"{path}: {len(padded)} shards ({names}) hold a padded record; a job writes at most one")
    check_totals(manifest, path, padded_records=len(padded))
    if not padded:
        return ShardLayout(size)
    return ShardLayout(size, padded[0][0], padded[0][1])


def check_totals(manifest: dict, path: str, padded_records: int) -> None:
    """The manifest's totals, packing and shuffle stats agree with its shard list (see module doc).

    Fields a manifest does not have are not checked.

    Raises:
        ManifestError: naming the manifest and the numbers that disagree.
    """
    shards = manifest["shards"]
    total = sum(int(s["records"]) for s in shards)
    totals = manifest.get("totals") or {}
    packing = manifest.get("packing") or {}
    problems = []
    if "records" in totals and int(totals["records"]) != total:
        problems.append(f"totals.records is {totals['records']}, the shards hold {total}")
    if "bytes" in totals and int(totals["bytes"]) != sum(int(s["bytes"]) for s in shards):
        problems.append(f"totals.bytes is {totals['bytes']}, the shards hold {sum(int(s['bytes']) for s in shards)}")
    if "remainder_policy" in packing or "mode" in packing:
        declared = int(packing.get("padded_records", 0))
        if declared != padded_records:
            problems.append(f"packing.padded_records is {declared}, {padded_records} shard(s) hold a padded record")
        if "records_from_chunks" in packing:
            parts = int(packing["records_from_chunks"]) + int(packing.get("records_from_tails", 0)) + declared
            if parts != total:
                problems.append(
                    f"packing.records_from_chunks {packing['records_from_chunks']} + records_from_tails "
                    f"{packing.get('records_from_tails', 0)} + padded_records {declared} = {parts}, "
                    f"the shards hold {total}"
                )
        if "label_tokens" in totals and "padding_labels" in packing:
            labels = total * int(manifest["seq_len"]) - int(packing["padding_labels"])
            if int(totals["label_tokens"]) != labels:
                problems.append(
                    f"totals.label_tokens is {totals['label_tokens']}, {total} records x seq_len "
                    f"{manifest['seq_len']} - {packing['padding_labels']} padding = {labels}"
                )
    shuffle = manifest.get("shuffle") or {}
    if "num_shards" in shuffle and int(shuffle["num_shards"]) != len(shards):
        problems.append(f"shuffle.num_shards is {shuffle['num_shards']}, the manifest lists {len(shards)} shards")
    if problems:
        raise ManifestError(f"{path}: the manifest is inconsistent: " + "; ".join(problems))


def locate_padded(read_at: Callable[[int, int], bytes], count: int, layout: ShardLayout) -> int:
    """Position of the padded record in its shard, by binary search over record headers.

    Args:
        read_at: read_at(offset, size) -> the shard's bytes at [offset, offset + size).
        count: records in the shard.
        layout: the output's layout (`shard_layout`), with a padded shard.

    Returns:
        The padded record's index p (record j > p starts `layout.padded_extra` bytes later).

    Raises:
        ValueError: the headers do not show one padded record (a shard whose content does not
            match its size arithmetic).
    """
    size, extra = layout.record_bytes, layout.padded_extra
    full, padded = size - HEADER_BYTES - FOOTER_BYTES, size - HEADER_BYTES - FOOTER_BYTES + extra

    def starts_here(j: int) -> bool:
        return header_length(read_at(j * size, HEADER_BYTES)) in (full, padded)

    if not starts_here(0):
        raise ValueError("no valid record header at offset 0")
    lo, hi = 0, count - 1  # invariant: starts_here(lo); the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts_here(mid):
            lo = mid
        else:
            hi = mid - 1
    if header_length(read_at(lo * size, HEADER_BYTES)) != padded:
        raise ValueError(f"record {lo} should be the padded record ({padded} bytes of data) and is not")
    if lo + 1 < count and header_length(read_at((lo + 1) * size + extra, HEADER_BYTES)) != full:
        raise ValueError(f"no valid record header after the padded record {lo}")
    return lo
