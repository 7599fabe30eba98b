"""tf.data reader: missing, truncated and corrupted shards and untrue manifests fail loudly, naming the file.

What is detected when (docs/reader.md has the same table):
  before step 0, every rank: a manifest whose counts do not add up (ManifestError); a shard missing,
      of another size, or whose last record is not where the size arithmetic puts it
      (ShardIntegrityError); with verify=True, another sha256.
  while reading, the rank that reads it: a record failing its CRC, a shard cut short or gone since
      the start (tf.errors.InvalidArgumentError carrying "ShardIntegrityError: <path>", which
      `shard_errors()` turns into ShardIntegrityError).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid

import fsspec
import google_crc32c
import numpy as np
import pytest
import tensorflow as tf
from synthetic_output import record_ids, shard_path, write_output

from pipeline import tfdata
from pipeline.format import framing, layout, records
from pipeline.format.manifest import ManifestError

COUNTS = [6, 9, 7, 8]


@pytest.fixture()
def out(tmp_path):
    d = str(tmp_path / "out")
    manifest = write_output(d, COUNTS, seq_len=6)
    return d, manifest


def read_all(d, **kw):
    kw.setdefault("shuffle", False)
    kw.setdefault("shuffle_buffer", 2)  # windows of one batch: unshuffled, that is the manifest's order
    return [record_ids(b["inputs"].numpy()) for b in tfdata.make_dataset(d, 2, **kw)]


def rewrite_records(path: str, keep: int) -> None:
    """Rewrite a shard with only its first `keep` records: a file cut at a record boundary."""
    kept = list(tf.data.TFRecordDataset(path).take(keep).as_numpy_iterator())
    with tf.io.TFRecordWriter(path) as w:
        for r in kept:
            w.write(r)


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("damage", ["missing", "cut_at_record", "cut_mid_record"])
def test_missing_or_truncated_shard_fails_on_every_rank_before_step_0(out, damage):
    d, manifest = out
    path = shard_path(d, manifest, 2)
    if damage == "missing":
        os.remove(path)
    elif damage == "cut_at_record":
        rewrite_records(path, COUNTS[2] - 1)  # clean TFRecord: only the manifest's size catches it
    else:
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 5)
    for rank in range(3):  # every rank checks every shard, whichever it reads
        with pytest.raises(tfdata.ShardIntegrityError, match=re.escape(path)) as e:
            tfdata.make_dataset(d, 2, dp_rank=rank, dp_size=3, seed=1)
        assert e.value.path.endswith(os.path.basename(path))
        assert ("missing" if damage == "missing" else "bytes on disk") in str(e.value)


def test_corrupted_shard_named_at_the_record_and_by_verify(out):
    d, manifest = out
    path = shard_path(d, manifest, 1)
    record_bytes = os.path.getsize(path) // COUNTS[1]
    flip_byte(path, 4 * record_bytes + record_bytes // 2)  # inside record 4's data: same size, bad CRC
    # Start checks pass; the read stops at the record with the file's name, nothing skipped silently.
    ids = []
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(path)) as raw:
        for b in tfdata.make_dataset(d, 2, shuffle=False, shuffle_buffer=2, num_parallel_reads=1):
            ids.extend(record_ids(b["inputs"].numpy()).tolist())
    assert ids == list(range(len(ids))) and len(ids) < sum(COUNTS)  # only records before the damage
    assert all(i < COUNTS[0] + 4 for i in ids)
    # One type to catch: the in-graph error, converted.
    converted = tfdata.integrity_error(raw.value)
    assert isinstance(converted, tfdata.ShardIntegrityError) and converted.path == path
    assert "read" in converted.problem and "promises 2" in converted.problem
    with pytest.raises(tfdata.ShardIntegrityError) as caught:
        with tfdata.shard_errors():
            for _ in tfdata.make_dataset(d, 2, shuffle=False):
                pass
    assert caught.value.path == path and isinstance(caught.value.__cause__, tf.errors.OpError)
    # verify=True catches it on every rank before step 0.
    for rank in range(2):
        with pytest.raises(tfdata.ShardIntegrityError, match="sha256") as e:
            tfdata.make_dataset(d, 2, dp_rank=rank, dp_size=2, seed=3, verify=True)
        assert e.value.path == path


def test_corrupted_length_header_is_named(out):
    d, manifest = out
    path = shard_path(d, manifest, 3)
    record_bytes = os.path.getsize(path) // COUNTS[3]
    flip_byte(path, 2 * record_bytes + 1)  # record 2's length field
    with pytest.raises(tf.errors.OpError, match=re.escape(path)):
        read_all(d, num_parallel_reads=2)


def test_shard_vanishing_after_start_is_named(out):
    d, manifest = out
    ds = tfdata.make_dataset(d, 2, seed=4)
    path = shard_path(d, manifest, 0)
    os.remove(path)
    with pytest.raises(tf.errors.OpError, match=re.escape(path)):
        for _ in ds:
            pass


def test_verify_passes_on_intact_output(out):
    d, _ = out
    assert sorted(np.concatenate(read_all(d, verify=True)).tolist()) == list(range(sum(COUNTS)))


def test_fsspec_only_filesystem_reads_through_verified_cache(out, tmp_path):
    d, manifest = out
    root = f"memory://tfdata-{uuid.uuid4().hex}/out"
    fs = fsspec.filesystem("memory")
    for name in os.listdir(d):
        with open(os.path.join(d, name), "rb") as f:
            fs.pipe(f"{root}/{name}", f.read())
    local = read_all(d, seed=5, shuffle=True)
    cache = tmp_path / "cache"
    cache.mkdir()
    remote = read_all(root, seed=5, shuffle=True, cache_dir=str(cache))
    assert all(np.array_equal(a, b) for a, b in zip(local, remote, strict=True))
    # A corrupted remote shard (same size) is caught by the cache's sha256 check, named.
    name = manifest["shards"][2]["path"]
    data = bytearray(fs.cat(f"{root}/{name}"))
    data[len(data) // 2] ^= 0xFF
    fs.pipe(f"{root}/{name}", bytes(data))
    with pytest.raises(tf.errors.OpError, match=re.escape(name)):
        read_all(root, cache_dir=str(cache))
    # A missing one is caught before step 0.
    fs.rm(f"{root}/{name}")
    with pytest.raises(tfdata.ShardIntegrityError, match="missing"):
        tfdata.make_dataset(root, 2, shuffle=False)
    fs.rm(root, recursive=True)
    shutil.rmtree(cache, ignore_errors=True)


def test_shard_errors_leaves_other_errors_alone():
    assert tfdata.integrity_error(tf.errors.InvalidArgumentError(None, None, "shape mismatch")) is None
    assert tfdata.integrity_error(ValueError("x")) is None
    with pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
        with tfdata.shard_errors():
            raise tf.errors.InvalidArgumentError(None, None, "shape mismatch")
    error = tfdata.ShardIntegrityError("/x/a b: c.tfrecord", "missing")
    assert tfdata.integrity_error(error) is error


# ------------------------------------------------------------------------------------------
# The manifest is checked against itself and against the files before step 0
# ------------------------------------------------------------------------------------------


def edit_manifest(d: str, change) -> str:
    path = os.path.join(d, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    change(m)
    with open(path, "w") as f:
        json.dump(m, f)
    return path


@pytest.mark.parametrize("delta", [-1, 1, 3])
def test_a_shard_record_count_that_disagrees_with_its_bytes_is_refused(out, delta):
    d, manifest = out
    name = manifest["shards"][1]["path"]

    def change(m):
        m["shards"][1]["records"] += delta
        m["totals"]["records"] += delta  # a careful editor keeps the totals in step
        m["packing"]["records_from_chunks"] += delta
        m["totals"]["label_tokens"] += delta * 6

    path = edit_manifest(d, change)
    for rank in range(2):
        with pytest.raises(ManifestError, match=re.escape(path)) as e:
            tfdata.make_dataset(d, 2, dp_rank=rank, dp_size=2, seed=1)
        assert name in str(e.value) and "do not match" in str(e.value)


def test_records_and_bytes_changed_together_fail_on_the_file_size(out):
    d, manifest = out
    record = os.path.getsize(shard_path(d, manifest, 2)) // COUNTS[2]

    def change(m):
        m["shards"][2]["records"] -= 1
        m["shards"][2]["bytes"] -= record
        m["totals"]["records"] -= 1
        m["totals"]["bytes"] -= record
        m["totals"]["label_tokens"] -= 6
        m["packing"]["records_from_chunks"] -= 1

    edit_manifest(d, change)
    with pytest.raises(tfdata.ShardIntegrityError, match="bytes on disk") as e:
        tfdata.make_dataset(d, 2, seed=1)
    assert e.value.path == shard_path(d, manifest, 2)


@pytest.mark.parametrize("field,fix", [
    ("totals.records", lambda m: m["totals"].__setitem__("records", m["totals"]["records"] + 1)),
    ("totals.bytes", lambda m: m["totals"].__setitem__("bytes", m["totals"]["bytes"] - 7)),
    ("totals.label_tokens", lambda m: m["totals"].__setitem__("label_tokens", 5)),
    ("records_from_chunks", lambda m: m["packing"].__setitem__("records_from_chunks", 1)),
    ("packing.padded_records", lambda m: m["packing"].__setitem__("padded_records", 1)),
    ("shuffle.num_shards", lambda m: m["shuffle"].__setitem__("num_shards", 9)),
])
def test_an_inconsistent_manifest_is_refused_naming_the_file(out, field, fix):
    d, _ = out
    path = edit_manifest(d, fix)
    with pytest.raises(ManifestError, match=re.escape(path)) as e:
        tfdata.make_dataset(d, 2, seed=1)
    assert "inconsistent" in str(e.value) and field in str(e.value)


def test_a_shard_of_the_right_size_with_other_content_is_refused_before_step_0(out):
    d, manifest = out
    path = shard_path(d, manifest, 3)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size - size // COUNTS[3])  # the last record's header
        f.write(b"\0" * 12)
    with pytest.raises(tfdata.ShardIntegrityError, match="no record header") as e:
        tfdata.make_dataset(d, 2, seed=1)
    assert e.value.path == path


@pytest.mark.parametrize("padded", [0, 6, 9, 14, 29])  # first of shard 0, first/middle/last of shard 1, last
def test_the_padded_record_is_located_wherever_it_is(tmp_path, padded):
    d = str(tmp_path / "out")
    write_output(d, COUNTS, seq_len=6, padded_record=padded, padded_valid=2)
    ids = np.concatenate(read_all(d))
    assert ids.tolist() == list(range(sum(COUNTS)))
    mask = np.concatenate([b["loss_mask"].numpy() for b in tfdata.make_dataset(d, 2, shuffle=False, shuffle_buffer=2)])
    assert mask[padded].tolist() == [1, 1, 0, 0, 0, 0] and mask.sum() == 6 * sum(COUNTS) - 4
    # Every rank reads its runs at the right offsets, the padded shard's included.
    got = np.concatenate([np.concatenate(read_all(d, shuffle=True, seed=3, dp_rank=r, dp_size=3, shuffle_buffer=12))
                          for r in range(3)])
    assert sorted(got.tolist()) == sorted(set(got.tolist())) and len(got) == 30


def test_layout_arithmetic_matches_the_written_bytes():
    for seq_len, dtype, boundaries in [(6, "<u2", True), (128, "<u2", False), (300, "<i4", True)]:
        dtype = np.dtype(dtype)
        full = layout.payload_bytes(seq_len, dtype, boundaries)
        tokens = np.arange(seq_len + 1) % 1000
        seg = np.ones(seq_len) if boundaries else None
        assert len(records.serialize_example(tokens, seg, seg, None, dtype)) == full
        for valid in (1, seq_len - 1):
            padded = len(records.serialize_example(tokens, seg, seg, valid, dtype))
            assert padded - full in layout.padded_extras(seq_len, dtype, boundaries)
    rng = np.random.default_rng(0)
    for n in (0, 1, 8, 100):
        data = rng.bytes(n)
        assert layout.masked_crc32c(data) == framing.masked_crc32c(data)
    assert google_crc32c.value(b"123456789") == 0xE3069283  # the check value: same CRC-32C
    header = framing.frame(b"x" * 40)[:12]
    assert layout.header_length(header) == 40
    assert layout.header_length(header[:8] + b"\0\0\0\0") is None
