"""tf.data reader: one global order for any number of ranks, seeds, steps, exact resumption, output format."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from synthetic_output import record_ids, record_tokens, write_output

from pipeline import tfdata
from pipeline.core import hashing
from pipeline.format.manifest import ManifestError
from pipeline.reader.engine import plan

SEQ_LEN = 8
# 8 uneven shards and 3 big ones (more ranks than shards).
MANY = [13, 7, 10, 5, 9, 11, 6, 8]
FEW = [23, 17, 31]
# Enough records for several windows of a global batch of 24 (divisible by 1, 2, 3, 4, 8).
ELASTIC = [37, 52, 41, 29, 60, 33, 48, 45, 30, 55]
GLOBAL = 24


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("many"))
    write_output(out, MANY, seq_len=SEQ_LEN, padded_record=20)
    return out


@pytest.fixture(scope="module")
def few(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("few"))
    write_output(out, FEW, seq_len=SEQ_LEN, document_boundaries=False)
    return out


@pytest.fixture(scope="module")
def elastic(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("elastic"))
    write_output(out, ELASTIC, seq_len=SEQ_LEN, padded_record=100)
    return out


def ids_of(ds) -> list[np.ndarray]:
    """Record ids of each batch."""
    return [record_ids(b["inputs"].numpy()) for b in ds]


def expected_global(counts, global_batch, seed, epoch, shuffle=True, window=2048) -> list[np.ndarray]:
    """Record ids of every global batch of an epoch, from the plan (the fixture numbers records shard by shard)."""
    firsts = np.cumsum([0] + list(counts[:-1]))
    order = tfdata.global_order(counts, global_batch, seed=seed, epoch=epoch, shuffle=shuffle, window=window)
    out = []
    for k in range(order.steps):
        shards, recs = tfdata.batch_records(order, k)
        out.append(firsts[shards] + recs)
    return out


def global_batches(out, global_batch, dp_size, **kw) -> list[np.ndarray]:
    """Each global batch, put together from the ranks' batches in rank order."""
    per_rank = [ids_of(tfdata.make_dataset(out, global_batch_size=global_batch, dp_rank=r, dp_size=dp_size, **kw))
                for r in range(dp_size)]
    assert len({len(b) for b in per_rank}) == 1  # same number of steps on every rank: no deadlock
    return [np.concatenate(parts) for parts in zip(*per_rank, strict=True)]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------------------------
# One global order: world sizes, sharding, seeds
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["many", "few"])
@pytest.mark.parametrize("dp_size", [1, 2, 3, 7])
def test_ranks_equal_steps_disjoint_and_covering(layout, dp_size, request):
    out = request.getfixturevalue(layout)
    counts = MANY if layout == "many" else FEW
    batch, seed, epoch = 2, 11, 3
    steps = tfdata.steps_per_epoch(out, batch, dp_size)
    assert steps == sum(counts) // (batch * dp_size)
    per_rank = []
    for rank in range(dp_size):
        ds = tfdata.make_dataset(out, batch, dp_rank=rank, dp_size=dp_size, seed=seed, epoch=epoch,
                                 shuffle_buffer=4, num_parallel_reads=3)
        batches = ids_of(ds)
        assert len(batches) == steps
        per_rank.append(batches)
    seen = np.concatenate([np.concatenate(b) for b in per_rank])
    assert len(np.unique(seen)) == len(seen) == dp_size * steps * batch  # disjoint, no duplicates
    assert sum(counts) - len(seen) < dp_size * batch  # fewer than one global batch left out
    # Rank r holds positions [r*B, (r+1)*B) of every global batch of the plan.
    expected = expected_global(counts, dp_size * batch, seed, epoch, window=4)
    for rank, batches in enumerate(per_rank):
        assert same(batches, [g[rank * batch : (rank + 1) * batch] for g in expected])


@pytest.mark.slow
@pytest.mark.parametrize("window", [24, 96, 2048])
def test_global_batches_are_the_same_for_every_world_size(elastic, window):
    kw = dict(seed=5, epoch=1, shuffle_buffer=window, num_parallel_reads=2)
    one = global_batches(elastic, GLOBAL, 1, **kw)
    assert same(one, expected_global(ELASTIC, GLOBAL, 5, 1, window=window))
    assert len(one) == sum(ELASTIC) // GLOBAL
    for dp_size in (2, 3, 8):
        assert same(global_batches(elastic, GLOBAL, dp_size, **kw), one), dp_size
    # The per-rank batch size is what changes: batch_size x dp_size is the same global batch (and 4 ranks).
    ranks = [ids_of(tfdata.make_dataset(elastic, 6, dp_rank=r, dp_size=4, **kw)) for r in range(4)]
    assert same([np.concatenate(p) for p in zip(*ranks, strict=True)], one)


@pytest.mark.slow
def test_resume_on_another_world_size_continues_the_same_order(elastic):
    kw = dict(seed=9, shuffle_buffer=96, num_epochs=2)
    full = global_batches(elastic, GLOBAL, 1, **kw)
    steps = tfdata.steps_per_epoch(elastic, GLOBAL, 1)
    assert len(full) == 2 * steps
    # Stop at step k on 2 ranks, continue on W' ranks: exactly the uninterrupted run's batches.
    for k, before, after in [(5, 2, 3), (steps - 1, 4, 1), (steps + 3, 8, 2), (7, 3, 8)]:
        first = global_batches(elastic, GLOBAL, before, **kw)[:k]
        rest = global_batches(elastic, GLOBAL, after, start_step=k, **kw)
        assert same(first + rest, full), (k, before, after)
    # The same point addressed as (epoch, step within the epoch).
    again = global_batches(elastic, GLOBAL, 4, seed=9, shuffle_buffer=96, epoch=1, start_step=3)
    assert same(again, full[steps + 3 :])


def _bytes_read() -> int:
    """Bytes this process has read through read(2)/pread(2) so far, page-cache hits included (Linux)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.parametrize("dp_size", [1, 4])
def test_each_rank_reads_only_the_records_it_uses(tmp_path_factory, dp_size):
    out = str(tmp_path_factory.mktemp(f"io{dp_size}"))
    write_output(out, [300] * 6, seq_len=512, document_boundaries=False)
    record = os.path.getsize(os.path.join(out, "train-00000-of-00006.tfrecord")) // 300
    g = 32
    for rank in range(dp_size):
        ds = tfdata.make_dataset(out, global_batch_size=g, dp_rank=rank, dp_size=dp_size, seed=3, shuffle_buffer=256)
        before = _bytes_read()
        steps = sum(1 for _ in ds)
        read = _bytes_read() - before
        used = steps * g // dp_size * record
        assert steps == 1800 // g
        assert used <= read <= used * 1.02 + (16 << 10), (rank, read, used)


def test_model_parallel_peers_passing_the_same_dp_rank_get_the_same_batches(many):
    a = ids_of(tfdata.make_dataset(many, 2, dp_rank=1, dp_size=3, seed=4))
    b = ids_of(tfdata.make_dataset(many, 2, dp_rank=1, dp_size=3, seed=4))
    assert same(a, b)


def test_same_seed_same_order_other_seed_other_order(many):
    def run(seed, epoch=0):
        return np.concatenate(ids_of(tfdata.make_dataset(many, 3, seed=seed, epoch=epoch, shuffle_buffer=12)))

    a, b, c = run(7), run(7), run(8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    d = run(7, epoch=1)
    assert not np.array_equal(a, d)  # another epoch, another order
    assert len(set(a.tolist())) == len(a)


def test_the_batches_of_a_fixed_seed_epoch_and_window_do_not_change(many):
    # The record ids a training run sees, pinned: a resumed checkpoint depends on this order.
    ds = tfdata.make_dataset(many, global_batch_size=4, seed=2027, epoch=3, shuffle_buffer=12)
    assert [b.tolist() for b in ids_of(ds)] == [
        [36, 38, 40, 42], [37, 39, 41, 43], [56, 60, 22, 23], [55, 59, 21, 24], [57, 58, 20, 25],
        [28, 13, 16, 19], [26, 29, 17, 30], [27, 14, 15, 18], [31, 44, 46, 49], [33, 34, 48, 50],
        [32, 45, 47, 51], [53, 1, 5, 8], [52, 2, 3, 7], [54, 0, 4, 6], [11, 62, 64, 67],
        [10, 61, 65, 68], [9, 12, 63, 66]]


@pytest.mark.slow
def test_shuffle_needs_a_seed_and_no_shuffle_is_manifest_order(many):
    with pytest.raises(ValueError, match="seed"):
        tfdata.make_dataset(many, 2)
    # Without shuffling no seed is needed. With windows of one batch, global batch k is records
    # k*G .. (k+1)*G - 1; with windows of S batches, record i of a window goes to batch i mod S.
    ids = np.concatenate(ids_of(tfdata.make_dataset(many, 2, shuffle=False, shuffle_buffer=2)))
    assert np.array_equal(ids, np.arange(len(ids)))
    two = global_batches(many, 6, 3, shuffle=False, shuffle_buffer=6)
    assert np.array_equal(np.concatenate(two), np.arange(len(two) * 6))
    windows = global_batches(many, 6, 3, shuffle=False, shuffle_buffer=36)  # 69 records: 11 batches
    size = int(tfdata.global_order(MANY, 6, shuffle=False, window=36).window_starts[1])
    assert size == 5  # 2 windows of 5 and 6 batches (evened out)
    first = np.arange(6 * size).reshape(6, size).T  # record i of the window -> batch i % 5, position i // 5
    assert np.array_equal(np.stack(windows[:size]), first)


def test_keyed_permutations_are_permutations_and_differ_by_key():
    perms = {tuple(hashing.keyed_permutation(key, 50)) for key in range(20)}
    assert len(perms) == 20
    for p in perms:
        assert sorted(p) == list(range(50))
    assert hashing.keyed_permutation(7, 0).tolist() == []
    assert hashing.fold64(1, 2) != hashing.fold64(2, 1)
    assert hashing.fold64(2**64 - 1) == hashing.fold64(2**64 - 1)


# ------------------------------------------------------------------------------------------
# Epochs and resumption
# ------------------------------------------------------------------------------------------


def test_multiple_epochs_and_infinite_repeat(many):
    steps = tfdata.steps_per_epoch(many, 4, 2)
    two = ids_of(tfdata.make_dataset(many, 4, dp_rank=1, dp_size=2, seed=9, num_epochs=2))
    assert len(two) == 2 * steps
    e0 = ids_of(tfdata.make_dataset(many, 4, dp_rank=1, dp_size=2, seed=9, epoch=0))
    e1 = ids_of(tfdata.make_dataset(many, 4, dp_rank=1, dp_size=2, seed=9, epoch=1))
    assert all(np.array_equal(x, y) for x, y in zip(two, e0 + e1, strict=True))
    forever = tfdata.make_dataset(many, 4, dp_rank=1, dp_size=2, seed=9, num_epochs=None)
    assert forever.cardinality().numpy() == tf.data.INFINITE_CARDINALITY
    got = ids_of(forever.take(3 * steps + 1))
    e2 = ids_of(tfdata.make_dataset(many, 4, dp_rank=1, dp_size=2, seed=9, epoch=2))
    e3 = ids_of(tfdata.make_dataset(many, 4, dp_rank=1, dp_size=2, seed=9, epoch=3))
    assert all(np.array_equal(x, y) for x, y in zip(got, e0 + e1 + e2 + e3[:1], strict=True))
    assert two[0].tolist() != two[steps].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("dp_size,dp_rank,lanes,window", [(1, 0, 3, 4), (3, 2, 2, 12), (7, 3, 4, 1)])
def test_resume_at_any_step_reproduces_the_rest(many, dp_size, dp_rank, lanes, window):
    kw = dict(dp_rank=dp_rank, dp_size=dp_size, seed=21, shuffle_buffer=window, num_parallel_reads=lanes)
    batch = 2
    full = ids_of(tfdata.make_dataset(many, batch, num_epochs=2, **kw))
    steps = tfdata.steps_per_epoch(many, batch, dp_size)
    assert len(full) == 2 * steps
    for k in sorted({1, steps // 2 + 1, steps - 1, steps + 2} & set(range(1, 2 * steps))):
        rest = ids_of(tfdata.make_dataset(many, batch, start_step=k, num_epochs=2, **kw))
        assert len(rest) == 2 * steps - k
        assert same(rest, full[k:]), k
    # The number of concurrent reads does not change the order.
    other = ids_of(tfdata.make_dataset(many, batch, num_epochs=2, **{**kw, "num_parallel_reads": 1}))
    assert same(other, full)


def test_resume_reads_at_most_one_window_again():
    counts = [40] * 12
    order = tfdata.global_order(counts, 8, seed=5, window=32)
    fresh = tfdata.rank_plan(order, 1, 2)
    for k in range(order.steps):
        plan = tfdata.rank_plan(order, 1, 2, start_step=k)
        left = (order.steps - k) * 4
        records_read = int(plan.reads[:, 2].sum())
        assert left <= records_read < left + 4 * 4  # at most one window (4 batches of 4) re-read
        assert records_read - left == plan.windows[0, 3] if len(plan.windows) else records_read == 0
    assert int(fresh.reads[:, 2].sum()) == order.steps * 4


def test_resume_with_tf_train_checkpoint(many, tmp_path):
    kw = dict(dp_rank=0, dp_size=2, seed=3, shuffle_buffer=3, num_parallel_reads=2, num_epochs=2)
    full = ids_of(tfdata.make_dataset(many, 2, **kw))
    # 1) The trainer's way: the step lives in a tf.train.Checkpoint; the reader restarts from it.
    step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(step=step)
    it = iter(tfdata.make_dataset(many, 2, **kw))
    for _ in range(5):
        next(it)
        step.assign_add(1)
    path = ckpt.save(str(tmp_path / "trainer" / "ckpt"))
    step.assign(0)
    ckpt.restore(path)
    rest = ids_of(tfdata.make_dataset(many, 2, start_step=int(step.numpy()), **kw))
    assert all(np.array_equal(x, y) for x, y in zip(rest, full[5:], strict=True))
    # 2) The iterator itself in the checkpoint.
    it = iter(tfdata.make_dataset(many, 2, **kw))
    for _ in range(4):
        next(it)
    ckpt = tf.train.Checkpoint(iterator=it)
    path = ckpt.save(str(tmp_path / "iterator" / "ckpt"))
    after = [record_ids(b["inputs"].numpy()) for b in it]
    ckpt.restore(path)
    again = [record_ids(b["inputs"].numpy()) for b in it]
    assert len(after) == len(full) - 4
    assert all(np.array_equal(x, y) for x, y in zip(after, full[4:], strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(again, full[4:], strict=True))


# ------------------------------------------------------------------------------------------
# Output format
# ------------------------------------------------------------------------------------------


def test_batches_have_static_shapes_and_the_written_tokens(many):
    ds = tfdata.make_dataset(many, 4, seed=0, shuffle_buffer=6)
    spec = ds.element_spec
    assert set(spec) == {"inputs", "labels", "loss_mask", "segment_ids", "positions"}
    for name in spec:
        assert spec[name].shape == (4, SEQ_LEN)
    assert spec["inputs"].dtype == tf.int32 and spec["loss_mask"].dtype == tf.float32
    padded_seen = False
    for b in ds:
        ids = record_ids(b["inputs"].numpy())
        for row, rid in enumerate(ids):
            tokens = record_tokens(int(rid), SEQ_LEN, np.dtype("<u2"))
            mask = b["loss_mask"].numpy()[row]
            if rid == 20:  # the padded record: valid_labels = SEQ_LEN // 2
                padded_seen = True
                tokens[SEQ_LEN // 2 + 1 :] = 0
                assert mask.tolist() == [1.0] * (SEQ_LEN // 2) + [0.0] * (SEQ_LEN // 2)
                assert b["segment_ids"].numpy()[row, SEQ_LEN // 2 :].tolist() == [0] * (SEQ_LEN // 2)
            else:
                assert mask.tolist() == [1.0] * SEQ_LEN
            assert b["inputs"].numpy()[row].tolist() == tokens[:-1].tolist()
            assert b["labels"].numpy()[row].tolist() == tokens[1:].tolist()
    assert padded_seen


def test_features_selection(many, few):
    ds = tfdata.make_dataset(many, 2, seed=0, features=())
    assert set(ds.element_spec) == {"inputs", "labels", "loss_mask"}
    ds = tfdata.make_dataset(many, 2, seed=0, features=["positions"])
    assert set(ds.element_spec) == {"inputs", "labels", "loss_mask", "positions"}
    b = next(iter(ds))
    assert b["positions"].numpy()[0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="segment_ids"):
        tfdata.make_dataset(few, 2, seed=0, features=["segment_ids"])
    assert set(tfdata.make_dataset(few, 2, seed=0).element_spec) == {"inputs", "labels", "loss_mask"}


def test_int32_tokens(tmp_path):
    out = str(tmp_path)
    write_output(out, [6, 9], seq_len=5, dtype=np.dtype("<i4"), document_boundaries=False)
    ids = []
    for b in tfdata.make_dataset(out, 3, seed=2):
        rid = record_ids(b["inputs"].numpy(), np.dtype("<i4"))
        ids += rid.tolist()
        tokens = record_tokens(int(rid[0]), 5, np.dtype("<i4"))
        assert b["labels"].numpy()[0].tolist() == tokens[1:].tolist()
    assert sorted(ids) == list(range(15))


def test_steps_per_epoch_and_argument_errors(many):
    from pipeline.format import manifest as manifest_lib

    m = manifest_lib.load_manifest(many)
    assert tfdata.steps_per_epoch(m, 4, 3) == tfdata.steps_per_epoch(many, 4, 3) == 69 // 12
    assert tfdata.steps_per_epoch(os.path.join(many, "manifest.json"), 4, 3) == 5
    with pytest.raises(ValueError, match="dp_rank"):
        tfdata.make_dataset(many, 2, dp_rank=3, dp_size=3, seed=0)
    for bad in (0, -1):  # the documented ValueError, never a ZeroDivisionError
        with pytest.raises(ValueError, match=rf"batch_size \({bad}\) and dp_size \(1\) must be >= 1"):
            plan.steps_for(69, bad)
        with pytest.raises(ValueError, match=rf"batch_size \(4\) and dp_size \({bad}\) must be >= 1"):
            plan.steps_for(69, 4, bad)
        with pytest.raises(ValueError, match=r"batch_size .* must be >= 1"):
            tfdata.steps_per_epoch(m, bad)
        with pytest.raises(ValueError, match=rf"global_batch_size {bad} is outside \[1, "):
            tfdata.make_dataset(many, global_batch_size=bad, seed=0)
        with pytest.raises(ValueError, match=rf"batch_size {bad} is outside \[1, "):
            tfdata.make_dataset(many, bad, seed=0)
        with pytest.raises(ValueError, match=rf"global_batch \({bad}\) and window \(2048\) must be >= 1"):
            tfdata.global_order([5, 3], bad, seed=0)
    with pytest.raises(ValueError, match="lower the batch size"):
        tfdata.make_dataset(many, 20, dp_size=4, seed=0)
    with pytest.raises(ValueError, match="features"):
        tfdata.make_dataset(many, 2, seed=0, features=["tokens"])
    with pytest.raises(ManifestError):
        tfdata.make_dataset(os.path.dirname(many), 2, seed=0)


# ------------------------------------------------------------------------------------------
# Distributed helpers and imports
# ------------------------------------------------------------------------------------------


def test_dp_helpers(monkeypatch):
    hvd = types.ModuleType("horovod.tensorflow")
    hvd.rank, hvd.size = (lambda: 3), (lambda: 8)
    monkeypatch.setitem(sys.modules, "horovod", types.ModuleType("horovod"))
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", hvd)
    assert tfdata.dp_from_horovod() == (3, 8)
    smp = types.ModuleType("smdistributed.modelparallel.tensorflow")
    smp.dp_rank, smp.dp_size = (lambda: 1), (lambda: 2)
    for name in ("smdistributed", "smdistributed.modelparallel"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "smdistributed.modelparallel.tensorflow", smp)
    assert tfdata.dp_from_smp() == (1, 2)
    monkeypatch.setitem(sys.modules, "smdistributed.modelparallel.tensorflow", None)
    with pytest.raises(RuntimeError, match="smdistributed"):
        tfdata.dp_from_smp()
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", None)
    with pytest.raises(RuntimeError, match="horovod"):
        tfdata.dp_from_horovod()


@pytest.mark.slow
def test_imports_without_beam_or_sentencepiece():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('apache_beam', 'sentencepiece'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from pipeline.tfdata import make_dataset, steps_per_epoch, dp_from_horovod, dp_from_smp\n"
        "from pipeline.tfdata import ShardIntegrityError\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def test_plan_worked_example_from_the_docstring():
    # Shards of [5, 3, 4] records, no shuffling, global batch 4: batch 1 is stream records 4..7.
    order = tfdata.global_order([5, 3, 4], 4, shuffle=False, window=4)
    assert order.steps == 3
    shards, recs = tfdata.batch_records(order, 1)
    assert list(zip(shards.tolist(), recs.tolist(), strict=True)) == [(0, 4), (1, 0), (1, 1), (1, 2)]
    rank0, rank1 = tfdata.rank_plan(order, 0, 2), tfdata.rank_plan(order, 1, 2)
    assert rank0.reads[1:3].tolist() == [[0, 4, 1], [1, 0, 1]]  # window 1: shard 0 record 4, shard 1 record 0
    assert rank1.reads[1].tolist() == [1, 1, 2]  # window 1: shard 1 records 1-2
    # Shuffling with window 8: 3 batches in windows of 1 and 2 batches (sizes evened out).
    shuffled = tfdata.global_order([5, 3, 4], 4, seed=0, window=8)
    assert shuffled.window_starts.tolist() == [0, 1, 3]


def test_default_window_is_about_8_mib_of_tokens():
    assert tfdata.default_window(2048, 2) == 2048
    assert tfdata.default_window(4096, 4) == 512
    assert tfdata.default_window(8, 2) == plan.MAX_WINDOW
    assert tfdata.default_window(10**6, 4) == plan.MIN_WINDOW


def test_byte_offset_reads_are_the_records_at_those_offsets(many):
    # The reader reads runs through the TFRecordDatasetV2 raw op's byte_offsets (the public
    # TFRecordDataset has no such argument): fails loudly if that op changes.
    from pipeline.reader import graph

    path = os.path.join(many, "train-00001-of-00008.tfrecord")
    size = os.path.getsize(path) // MANY[1]
    reads = tf.data.Dataset.from_tensors(tf.constant([path]))
    got = list(reads.flat_map(lambda p: graph.records_at(p, 3 * size, 2, size)).as_numpy_iterator())
    want = list(tf.data.TFRecordDataset(path).skip(3).take(2).as_numpy_iterator())
    assert got == want and len(got) == 2
