"""Synthetic pipeline outputs for the reader's tests and benchmark: shards + manifest, the pipeline's format.

Every record carries its global id in its first tokens, so a test can tell exactly which records a
rank saw: `record_ids(batch)` decodes them back from a batch's "inputs". The manifest has the job's
shape: every field it writes is one the job writes, of the same type, and its `tokenizer` holds every
key the job's does (tests/test_manifest_shape.py checks both against the shape of the job's own
manifests, so that a reader check of a field the job does not write cannot pass here).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow as tf

from pipeline.format import manifest as manifest_lib
from pipeline.format import records
from pipeline.io import outputs

VOCAB_SIZE = 65536
PAD_ID = 0
UINT16 = np.dtype("<u2")


def record_tokens(record_id: int, seq_len: int, dtype: np.dtype) -> np.ndarray:
    """The seq_len + 1 tokens of record `record_id`: its id in the first two, then a pattern."""
    rng = np.random.default_rng(record_id)
    tokens = rng.integers(3, min(VOCAB_SIZE, 2**16), seq_len + 1).astype(np.int64)
    if np.dtype(dtype) == np.dtype("<u2"):
        tokens[0], tokens[1] = record_id & 0xFFFF, record_id >> 16
    else:
        tokens[0], tokens[1] = record_id, 7
    return tokens


def record_ids(inputs: np.ndarray, dtype: np.dtype = UINT16) -> np.ndarray:
    """Global record ids of a batch, from its "inputs" ([B, L] int32)."""
    inputs = np.asarray(inputs, dtype=np.int64)
    if np.dtype(dtype) == np.dtype("<u2"):
        return inputs[:, 0] + (inputs[:, 1] << 16)
    return inputs[:, 0]


def tokenizer_entry(sha256: str = "0" * 64, *, vocab_size: int = VOCAB_SIZE, bos_id: int = 1, eos_id: int = 2,
                    pad_id: int = PAD_ID, unk_id: int = 3, add_bos: bool = False, add_eos: bool = True,
                    model: str = "synthetic.model") -> dict:
    """The manifest's `tokenizer` with the keys the job writes (pipeline/beam/manifest.py `tokenizer_json`)."""
    separator = eos_id if add_eos else bos_id
    return {
        "model": model,
        "sha256": sha256,
        "vocab_size": vocab_size,
        "bos_id": bos_id,
        "eos_id": eos_id,
        "pad_id": pad_id,
        "unk_id": unk_id,
        "add_bos": add_bos,
        "add_eos": add_eos,
        "separator_id": separator,
        "padding_id": pad_id if pad_id >= 0 else separator,
        "backend": {"name": "sentencepiece", "version": "synthetic"},
    }


def write_output(
    out_dir: str,
    shard_records: list[int],
    *,
    seq_len: int = 8,
    dtype: np.dtype = UINT16,
    document_boundaries: bool = True,
    padded_record: int | None = None,
    padded_valid: int | None = None,
    split: str = "train",
    first_id: int = 0,
    tokenizer_sha256: str = "0" * 64,
    tokenizer: dict | None = None,
    subsets: dict | None = None,
) -> dict:
    """Write shards holding records 0..N-1 in order, and the manifest; returns the manifest.

    Args:
        out_dir: output directory (created).
        shard_records: records per shard.
        seq_len: label positions per record.
        dtype: token dtype ("<u2" or "<i4").
        document_boundaries: also write segment_ids / positions.
        padded_record: global id of the one padded record (with valid_labels), if any.
        padded_valid: its valid label count (default seq_len // 2).
        split: the manifest's split.
        first_id: the first record's id (several outputs with distinct ids: a mixture's sources).
        tokenizer_sha256: the tokenizer hash the manifest records.
        tokenizer: other fields of the manifest's `tokenizer` (special ids, vocab_size).
        subsets: the manifest's per-subset statistics.
    """
    dtype = np.dtype(dtype)
    os.makedirs(out_dir, exist_ok=True)
    shards, next_id, total_bytes = [], 0, 0
    padding = 0
    for index, count in enumerate(shard_records):
        name = f"{split}-{index:05d}-of-{len(shard_records):05d}.tfrecord"
        path = os.path.join(out_dir, name)
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(count):
                rid = first_id + next_id
                next_id += 1
                tokens = record_tokens(rid, seq_len, dtype)
                valid = None
                segment_ids = positions = None
                if document_boundaries:
                    half = seq_len // 2
                    segment_ids = np.array([1] * half + [2] * (seq_len - half))
                    positions = np.array(list(range(half)) + list(range(seq_len - half)))
                if rid == padded_record:
                    valid = padded_valid if padded_valid is not None else seq_len // 2
                    tokens[valid + 1 :] = PAD_ID
                    padding += seq_len - valid
                    if document_boundaries:
                        segment_ids[valid:] = 0
                        positions[valid:] = 0
                writer.write(records.serialize_example(tokens, segment_ids, positions, valid, dtype=dtype))
        data = open(path, "rb").read()
        total_bytes += len(data)
        shards.append({"path": name, "records": count, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {
        "format": manifest_lib.FORMAT,
        "format_version": manifest_lib.FORMAT_VERSION,
        "created_by": "scripts/datagen/synthetic_output.py",
        "split": split,
        "seq_len": seq_len,
        "features": records.feature_spec(seq_len, dtype, document_boundaries),
        "tokenizer": tokenizer_entry(tokenizer_sha256, **(tokenizer or {})),
        "shards": shards,
        "totals": {
            "records": next_id,
            "label_tokens": next_id * seq_len - padding,
            "bytes": total_bytes,
            "documents_kept": next_id,
            "lines": next_id,
        },
        "subsets": subsets or {},
        "packing": {
            "remainder_policy": "pad",
            "records_from_chunks": next_id - (padded_record is not None),
            "records_from_tails": 0,
            "padding_labels": padding,
            **({"padded_records": 1} if padded_record is not None else {}),
        },
        "shuffle": {"method": "synthetic: records in id order", "seed": 0, "num_shards": len(shard_records)},
        "dead_letters": {"by_reason": {}, "records": 0, "files": []},
        "inputs": [],
        "config": {"seq_len": seq_len},
    }
    outputs.write_manifest(out_dir, manifest)
    return manifest


def shard_path(out_dir: str, manifest: dict, index: int) -> str:
    """Local path of shard `index`."""
    return os.path.join(out_dir, manifest["shards"][index]["path"])
