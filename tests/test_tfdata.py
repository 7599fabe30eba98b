"""tf.data reader: sharding, seeded order, steps, exact resumption, output format."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
from reader_fixtures import record_ids, record_tokens, write_output

from pipeline import tfdata
from pipeline.core import hashing
from pipeline.format.manifest import ManifestError
from pipeline.reader import plan

SEQ_LEN = 8
# 8 uneven shards (>= 7 ranks: file-level) and 3 big ones (< 7 ranks: record-level fallback).
MANY = [13, 7, 10, 5, 9, 11, 6, 8]
FEW = [23, 17, 31]


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


def ids_of(ds) -> list[np.ndarray]:
    """Record ids of each batch."""
    return [record_ids(b["inputs"].numpy()) for b in ds]


def stream_ids(counts, seed, epoch, shuffle=True) -> np.ndarray:
    """All record ids in the epoch's stream order (the fixture numbers records shard by shard)."""
    firsts = np.cumsum([0] + list(counts[:-1]))
    order = tfdata.shard_order(len(counts), seed, epoch, shuffle)
    return np.concatenate([np.arange(firsts[s], firsts[s] + counts[s]) for s in order])


# ------------------------------------------------------------------------------------------
# Sharding: world sizes 1, 2, 3, 7
# ------------------------------------------------------------------------------------------


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
        batches = ids_of(
            tfdata.make_dataset(
                out,
                batch,
                dp_rank=rank,
                dp_size=dp_size,
                seed=seed,
                epoch=epoch,
                shuffle_buffer=4,
                num_parallel_reads=3,
            )
        )
        assert len(batches) == steps  # same number of steps on every rank: no Horovod deadlock
        per_rank.append(np.concatenate(batches))
    seen = np.concatenate(per_rank)
    assert len(np.unique(seen)) == len(seen) == dp_size * steps * batch  # disjoint, no duplicates
    # Exactly the documented tail is dropped: the last N - dp*P records of the epoch's stream.
    stream = stream_ids(counts, seed, epoch)
    kept = dp_size * steps * batch
    assert sorted(seen.tolist()) == sorted(stream[:kept].tolist())
    assert len(stream) - kept < dp_size * batch
    # Each rank holds exactly its contiguous slice of the stream (in shuffled order).
    for rank, ids in enumerate(per_rank):
        mine = stream[rank * steps * batch : (rank + 1) * steps * batch]
        assert sorted(ids.tolist()) == sorted(mine.tolist())


@pytest.mark.parametrize("dp_size", [1, 2, 3, 7])
def test_plan_file_level_when_enough_shards(dp_size):
    # Every rank reads whole shards except at most the two on its slice's edges.
    counts = [50] * 14
    seen_records = 0
    for rank in range(dp_size):
        plan = tfdata.plan_epoch(counts, 5, dp_rank=rank, dp_size=dp_size, seed=3, epoch=1, window=7)
        partial = [(s, a, b) for s, a, b in plan.segments if not (a == 0 and b == counts[s])]
        assert len(partial) <= 2
        seen_records += int((plan.segments[:, 2] - plan.segments[:, 1]).sum())
        assert plan.windows[:, 1].sum() == plan.steps * 5
    assert seen_records == dp_size * (700 // (5 * dp_size)) * 5


def test_plan_record_level_fallback_reads_little():
    # 2 shards, 7 ranks: each rank reads a record range, never a whole shard it does not need.
    counts = [70, 70]
    for rank in range(7):
        plan = tfdata.plan_epoch(counts, 4, dp_rank=rank, dp_size=7, seed=1, window=8)
        assert int((plan.segments[:, 2] - plan.segments[:, 1]).sum()) == plan.steps * 4 == 20
        assert len(plan.segments) <= 2


def test_dp_rank_mapping_identical_for_model_parallel_peers(many):
    # Peers of one dp group pass the same dp_rank and so get the same batches.
    a = ids_of(tfdata.make_dataset(many, 2, dp_rank=1, dp_size=3, seed=4))
    b = ids_of(tfdata.make_dataset(many, 2, dp_rank=1, dp_size=3, seed=4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------------------------
# Seeded order
# ------------------------------------------------------------------------------------------


def test_same_seed_same_order_other_seed_other_order(many):
    def run(seed, epoch=0):
        return np.concatenate(ids_of(tfdata.make_dataset(many, 3, seed=seed, epoch=epoch, shuffle_buffer=5)))

    a, b, c = run(7), run(7), run(8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    d = run(7, epoch=1)
    assert not np.array_equal(a, d)  # another epoch, another permutation
    assert len(set(a.tolist())) == len(a)


def test_shuffle_needs_a_seed(many):
    with pytest.raises(ValueError, match="seed"):
        tfdata.make_dataset(many, 2)
    # Without shuffling no seed is needed, and one lane reads the manifest's order.
    ids = np.concatenate(ids_of(tfdata.make_dataset(many, 2, shuffle=False, num_parallel_reads=1)))
    assert np.array_equal(ids, np.arange(len(ids)))


def test_window_permutation_shuffles_records(many):
    ids = np.concatenate(ids_of(tfdata.make_dataset(many, 2, seed=1, shuffle_buffer=64, num_parallel_reads=1)))
    order = tfdata.shard_order(len(MANY), 1, 0, True)
    first = int(np.sum(MANY[: order[0]]))
    head = ids[: MANY[order[0]]]
    assert sorted(head.tolist()) == list(range(first, first + MANY[order[0]]))  # window == shard here
    assert not np.array_equal(head, np.sort(head))  # but permuted


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


@pytest.mark.parametrize("dp_size,dp_rank,lanes,window", [(1, 0, 3, 4), (3, 2, 2, 5), (7, 3, 4, 1)])
def test_resume_at_any_step_reproduces_the_rest(many, dp_size, dp_rank, lanes, window):
    kw = dict(dp_rank=dp_rank, dp_size=dp_size, seed=21, shuffle_buffer=window, num_parallel_reads=lanes)
    batch = 2
    full = ids_of(tfdata.make_dataset(many, batch, num_epochs=2, **kw))
    steps = tfdata.steps_per_epoch(many, batch, dp_size)
    assert len(full) == 2 * steps
    for k in sorted({1, steps // 2 + 1, steps - 1, steps + 2} & set(range(1, 2 * steps))):
        rest = ids_of(tfdata.make_dataset(many, batch, start_step=k, num_epochs=2, **kw))
        assert len(rest) == 2 * steps - k
        assert all(np.array_equal(x, y) for x, y in zip(rest, full[k:], strict=True)), k
    # The same point addressed as (epoch, step within the epoch).
    again = ids_of(tfdata.make_dataset(many, batch, epoch=1, start_step=2, num_epochs=1, **kw))
    assert all(np.array_equal(x, y) for x, y in zip(again, full[steps + 2 :], strict=True))


def test_resume_reads_at_most_one_partial_shard_per_lane():
    counts = [40] * 12
    fresh = tfdata.plan_epoch(counts, 4, dp_rank=1, dp_size=2, seed=5, window=8, lanes=3)
    for k in range(fresh.steps):
        plan = tfdata.plan_epoch(counts, 4, dp_rank=1, dp_size=2, seed=5, window=8, lanes=3, start_step=k)
        starts = {int(s): int(a) for s, a, _ in fresh.segments}
        skipped = [int(first) - starts[int(shard)] for _, shard, first, n in plan.reads if n]
        assert sum(1 for x in skipped if x) <= 3  # one partial shard per lane at most
        assert all(0 <= x < 40 for x in skipped)
        records_read = int(plan.reads[:, 3].sum())
        left = (fresh.steps - k) * 4
        assert left <= records_read < left + 8  # at most one window re-read, never the epoch
        assert plan.windows[0, 3] < 8 if len(plan.windows) else True


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
    with pytest.raises(ValueError, match="lower batch_size"):
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
    # Shards in stream order of 4, 5 and 3 records (the docstring's [5, 3, 4] in order [2, 0, 1]).
    rank0 = tfdata.plan_epoch([4, 5, 3], 2, dp_rank=0, dp_size=2, shuffle=False, window=4, lanes=1)
    rank1 = tfdata.plan_epoch([4, 5, 3], 2, dp_rank=1, dp_size=2, shuffle=False, window=4, lanes=1)
    assert rank0.steps == rank1.steps == 3
    assert rank0.segments.tolist() == [[0, 0, 4], [1, 0, 2]]
    assert rank1.segments.tolist() == [[1, 2, 5], [2, 0, 3]]
    # Windows of 4 records, each segment closed by a 0-record marker.
    assert rank1.windows[:, 1].tolist() == [3, 0, 3, 0]


def test_default_window_is_about_8_mib_of_tokens():
    assert tfdata.default_window(2048, 2) == 2048
    assert tfdata.default_window(4096, 4) == 512
    assert tfdata.default_window(8, 2) == plan.MAX_WINDOW
    assert tfdata.default_window(10**6, 4) == plan.MIN_WINDOW
