"""tf.data reader: missing, truncated and corrupted shards fail loudly, naming the file."""

from __future__ import annotations

import os
import re
import shutil
import uuid

import fsspec
import numpy as np
import pytest
import tensorflow as tf
from reader_fixtures import record_ids, shard_path, write_output

from pipeline import tfdata

COUNTS = [6, 9, 7, 8]


@pytest.fixture()
def out(tmp_path):
    d = str(tmp_path / "out")
    manifest = write_output(d, COUNTS, seq_len=6)
    return d, manifest


def read_all(d, **kw):
    kw.setdefault("shuffle", False)
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
    # Size check passes; the read stops at the record with the file's name, nothing skipped silently.
    ids = []
    with pytest.raises(tf.errors.OpError, match=re.escape(path)):
        for b in tfdata.make_dataset(d, 2, shuffle=False, num_parallel_reads=1, shuffle_buffer=2):
            ids.extend(record_ids(b["inputs"].numpy()).tolist())
    assert ids == list(range(len(ids))) and len(ids) < sum(COUNTS)  # only records before the damage
    assert all(i < COUNTS[0] + 4 for i in ids)
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
