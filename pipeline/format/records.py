"""How one packed sequence is stored: a `tf.train.Example` whose token arrays are raw bytes.

Encoding (declared in the manifest's `features`, which readers must follow):
  tokens       bytes_list[1]: little-endian `token_dtype` values, seq_len + 1 of them. Inputs are
               tokens[:-1], labels tokens[1:]; consecutive records of one stream overlap by a token.
  segment_ids  bytes_list[1], optional: little-endian `token_dtype`, seq_len values, one per label
               position; 1, 2, ... per document (fragment) inside the record, 0 for padding.
  positions    bytes_list[1], optional: position of each label inside its segment, from 0.
  valid_labels int64_list[1], present only in the single padded record of a concat job: how many
               label positions are real. A reader parses it with default `seq_len`.

Two layouts, named by the manifest's `packing.mode` (`packing_mode`; absent: concat):
  concat    records cut from one stream of documents (pipeline/core/packing.py); segment ids and
            positions only with document boundaries; at most one padded record per job.
  best_fit  whole documents packed by best fit (pipeline/core/best_fit.py); records do not overlap;
            segment ids and positions always present, and segment id 0 marks padding: the loss mask
            is `segment_ids > 0`. No record carries valid_labels, so every record has one size.

Why raw bytes rather than int64 lists: serializing and parsing one bytes value costs nothing next to
the varint loop of int64 lists (a visible share of tokenizing time), and uint16 halves the shard size for
vocabularies up to 65,536 ids.

Why the Example is encoded here rather than with `tf.train.Example`: Beam workers would otherwise
import TensorFlow (seconds and several hundred MB each) just to build a four-field protobuf. The
bytes are pinned to `tf.train.Example(...).SerializeToString(deterministic=True)` by a test.
"""

from __future__ import annotations

import numpy as np

TOKENS = "tokens"
SEGMENT_IDS = "segment_ids"
POSITIONS = "positions"
VALID_LABELS = "valid_labels"
UINT16 = np.dtype("<u2")
CONCAT = "concat"
BEST_FIT = "best_fit"
PACKING_MODES = (CONCAT, BEST_FIT)


def token_dtype_for(vocab_size: int) -> np.dtype:
    """The smallest little-endian integer type holding every id of the vocabulary."""
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<i4")


def dtype_name(dtype: np.dtype) -> str:
    """The manifest's name for a token dtype ("uint16" or "int32")."""
    return {"<u2": "uint16", "<i4": "int32"}[np.dtype(dtype).str]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


def _bytes_feature(value: bytes) -> bytes:
    # Feature.bytes_list (1) -> BytesList.value (1)
    return _length_delimited(1, _length_delimited(1, value))


def _int64_feature(value: int) -> bytes:
    # Feature.int64_list (3) -> Int64List.value (1), packed; int64 varints are two's complement.
    return _length_delimited(3, _length_delimited(1, _varint(value & 0xFFFFFFFFFFFFFFFF)))


def serialize_example(
    tokens: np.ndarray,
    segment_ids: np.ndarray | None = None,
    positions: np.ndarray | None = None,
    valid_labels: int | None = None,
    dtype: np.dtype = UINT16,
) -> bytes:
    """Serialize one record exactly as `tf.train.Example.SerializeToString(deterministic=True)`."""
    features: dict[str, bytes] = {TOKENS: _bytes_feature(np.asarray(tokens, dtype).tobytes())}
    if segment_ids is not None:
        features[SEGMENT_IDS] = _bytes_feature(np.asarray(segment_ids, dtype).tobytes())
    if positions is not None:
        features[POSITIONS] = _bytes_feature(np.asarray(positions, dtype).tobytes())
    if valid_labels is not None:
        features[VALID_LABELS] = _int64_feature(int(valid_labels))
    # Deterministic serialization writes map entries sorted by key.
    entries = b"".join(
        _length_delimited(1, _length_delimited(1, key.encode()) + _length_delimited(2, value))
        for key, value in sorted(features.items())
    )
    return _length_delimited(1, entries)


def feature_spec(seq_len: int, dtype: np.dtype, document_boundaries: bool, packing: str = CONCAT) -> dict:
    """The manifest's description of the record features (what a reader must parse).

    `packing`: the layout (see the module doc); best_fit always has segment ids and positions.
    """
    name = dtype_name(dtype)
    if packing == BEST_FIT:
        spec = {TOKENS: {"kind": "bytes", "dtype": name, "byte_order": "little", "shape": [seq_len + 1]}}
        for key in (SEGMENT_IDS, POSITIONS):
            spec[key] = {"kind": "bytes", "dtype": name, "byte_order": "little", "shape": [seq_len]}
        spec[SEGMENT_IDS]["note"] = "0 marks padding: the loss mask is segment_ids > 0"
        return spec
    if packing != CONCAT:
        raise ValueError(f"packing {packing!r}: choose from {PACKING_MODES}")
    spec = {
        TOKENS: {"kind": "bytes", "dtype": name, "byte_order": "little", "shape": [seq_len + 1]},
        VALID_LABELS: {
            "kind": "int64",
            "shape": [],
            "default": seq_len,
            "note": "present only in the one padded record of a job",
        },
    }
    if document_boundaries:
        for key in (SEGMENT_IDS, POSITIONS):
            spec[key] = {"kind": "bytes", "dtype": name, "byte_order": "little", "shape": [seq_len]}
    return spec



def packing_mode(manifest: dict) -> str:
    """The layout of an output's records: its manifest's `packing.mode`, concat when absent.

    Raises:
        ValueError: an unknown mode, or a best_fit output whose features lack segment ids/positions.
    """
    mode = (manifest.get("packing") or {}).get("mode", CONCAT)
    if mode not in PACKING_MODES:
        raise ValueError(f"packing.mode {mode!r}: this reader understands {PACKING_MODES}")
    features = manifest.get("features") or {}
    if mode == BEST_FIT and not (SEGMENT_IDS in features and POSITIONS in features):
        raise ValueError("packing.mode best_fit: the features must declare segment_ids and positions "
                         "(segment id 0 marks padding)")
    return mode
