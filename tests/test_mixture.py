"""Mixtures in the tf.data reader: exact proportions, per-source epochs, elastic, resumable, re-weightable."""

from __future__ import annotations

import doctest
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from synthetic_output import VOCAB_SIZE, record_ids, write_output

from pipeline import tfdata
from pipeline.core import blend as blend_module
from pipeline.core.blend import blend, counts_after, integer_weights
from pipeline.format.mixture import MixtureError, load_mixture
from pipeline.reader.engine.mixture import MixtureOrder

SEQ_LEN = 8
G = 24  # divisible by 1, 2, 3, 4, 8
WINDOW = 96  # 4 steps per window
SEED = 5
ID_STRIDE = 10_000  # source i's records have ids i * ID_STRIDE + 0 .. N_i - 1
SIZES = {"big": [60, 45, 50], "small": [7], "mid": [30, 26]}
WEIGHTS = {"big": 0.6, "small": 0.25, "mid": 0.15}
EXTREME_3 = [0.001, 0.999, 0.3]
EXTREME_22 = [0.001, 0.999, 0.5, 1e-4, 0.25, 0.02, 0.7, 0.003, 0.1, 0.05, 0.33, 0.9, 0.011, 0.4, 0.0002, 0.6,
              0.08, 0.15, 0.007, 0.45, 0.035, 0.2]


def _assert_within_one(sources: np.ndarray, weights, initial=None) -> None:
    """After every n positions, each source's count is within 1 of n x its weight (exact integers)."""
    p, q = integer_weights(weights)
    counts = counts_after(sources, len(p)).astype(object)
    n = np.arange(1, len(sources) + 1, dtype=object)[:, None]
    err = np.abs(counts * q - n * np.array(p, dtype=object)[None, :])
    assert (err < q).all(), f"max deviation {float(err.max() / q):.4f} at n = {int(np.argmax(err.max(axis=1))) + 1}"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    paths = {}
    for i, (name, shards) in enumerate(SIZES.items()):
        paths[name] = str(root / name)
        write_output(paths[name], shards, seq_len=SEQ_LEN, first_id=i * ID_STRIDE,
                     subsets={name: {"tokens": sum(shards) * SEQ_LEN}})
    return root, paths


def _mixture(paths, weights=WEIGHTS, schedule=None) -> list:
    return tfdata.Mixture.of([(n, paths[n], weights[n]) for n in SIZES], schedule=schedule)


def _source_of(ids: np.ndarray) -> np.ndarray:
    return ids // ID_STRIDE


def _assert_no_repeat_within_an_epoch(ids: np.ndarray) -> None:
    """Each source's records, in the order taken: whole epochs, then distinct records (nothing twice early)."""
    for i, name in enumerate(SIZES):
        mine = ids[_source_of(ids) == i] - i * ID_STRIDE
        n = sum(SIZES[name])
        full, rest = divmod(len(mine), n)
        seen = np.bincount(mine, minlength=n)
        assert set(seen.tolist()) <= {full, full + 1} and int((seen == full + 1).sum()) == rest, name


def _ids(ds) -> list[np.ndarray]:
    return [record_ids(b["inputs"].numpy()) for b in ds]


def _global(mix, dp_size, **kw) -> list[np.ndarray]:
    per_rank = [_ids(tfdata.make_dataset(mix, global_batch_size=G, dp_rank=r, dp_size=dp_size, seed=SEED,
                                         shuffle_buffer=WINDOW, **kw)) for r in range(dp_size)]
    assert len({len(b) for b in per_rank}) == 1  # every rank the same number of steps
    return [np.concatenate(parts) for parts in zip(*per_rank, strict=True)]


def _same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


# -- the blend --------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", [EXTREME_3, EXTREME_22, [0.999] + [0.001 / 21] * 21], ids=["3", "22", "22-tiny"])
def test_every_prefix_is_within_one_of_n_times_the_weight(weights):
    sources = blend(weights, 40_000)
    _assert_within_one(sources, weights)
    # A resumed blend continues the same sequence.
    counts = np.bincount(sources[:12_345], minlength=len(weights))
    assert np.array_equal(blend(weights, 5000, start=12_345, counts=counts), sources[12_345:17_345])


def test_weights_with_many_digits_stay_within_one_of_the_weights_given():
    weights = list(np.random.default_rng(3).random(22) ** 6)  # no small common denominator: rounded to 2**-48
    sources = blend(weights, 30_000)
    w = np.array(weights) / sum(weights)
    counts = counts_after(sources, len(w))
    n = np.arange(1, len(sources) + 1)[:, None]
    assert np.abs(counts - n * w[None, :]).max() < 1


def test_the_reader_order_keeps_the_proportions_over_windows_and_22_sources(tmp_path):
    counts = [[3 + i] for i in range(22)]  # tiny sources: every one runs through many epochs
    order = MixtureOrder([f"s{i}" for i in range(22)], counts, [(0, tuple(EXTREME_22))], 16, seed=1, shuffle=True,
                         window_steps=8)
    steps = np.concatenate([order.window_sources(w) for w in range(40)]).reshape(-1)
    _assert_within_one(steps, EXTREME_22)


def test_the_worked_example_in_the_docstring():
    assert doctest.testmod(blend_module).failed == 0


def test_weights_are_exact_and_validated():
    assert integer_weights([0.001, 0.999]) == ([1, 999], 1000)
    assert integer_weights([2, 6]) == ([1, 3], 4)
    for bad in ([0, 0], [-1, 2], [float("nan"), 1], [True, 1]):
        with pytest.raises(ValueError):
            integer_weights(bad)


# -- the reader -------------------------------------------------------------------------------


@pytest.mark.slow
def test_global_batches_are_the_same_for_every_world_size(outputs):
    _, paths = outputs
    mix = _mixture(paths)
    one = _global(mix, 1, num_steps=14)
    assert len(one) == 14 and all(len(b) == G for b in one)
    for w in (2, 3, 4, 8):
        assert _same(_global(mix, w, num_steps=14), one), w
    # The stream of sources keeps the weights within one at every position.
    _assert_within_one(_source_of(np.concatenate(one)), [WEIGHTS[n] for n in SIZES])


def test_each_source_runs_its_own_epochs(outputs):
    _, paths = outputs
    mix = _mixture(paths)
    steps = 20  # a window boundary: every window consumes exactly the next samples of each source
    ids = np.concatenate(_ids(tfdata.make_dataset(mix, global_batch_size=G, seed=SEED, shuffle_buffer=WINDOW,
                                                  num_steps=steps)))
    state = tfdata.mixture_state(mix, G, steps, seed=SEED, shuffle_buffer=WINDOW)
    _assert_no_repeat_within_an_epoch(ids)
    for i, name in enumerate(SIZES):
        mine = ids[_source_of(ids) == i]
        assert state["counts"][i] == len(mine) and state["epochs"][i] == len(mine) // sum(SIZES[name])
    # The small source (index 1) ran through many epochs, each in its own order.
    order = tfdata.open_order(mix, G, seed=SEED, shuffle_buffer=WINDOW)
    assert state["epochs"][1] >= 5
    firsts = [order.locate(1, np.arange(e * 7, e * 7 + 7))[1].tolist() for e in range(4)]
    assert all(sorted(f) == list(range(7)) for f in firsts) and len({tuple(f) for f in firsts}) > 1


@pytest.mark.slow
@pytest.mark.parametrize(("w_first", "w_then", "k"), [(2, 3, 6), (4, 1, 9), (8, 2, 13), (1, 8, 4)])
def test_resume_at_step_k_on_another_world_size_equals_the_uninterrupted_run(outputs, w_first, w_then, k):
    _, paths = outputs
    mix = _mixture(paths)
    whole = _global(mix, 1, num_steps=18)
    assert _same(_global(mix, w_first, num_steps=k), whole[:k])
    state = json.loads(json.dumps(tfdata.mixture_state(mix, G, k, seed=SEED, shuffle_buffer=WINDOW)))
    assert _same(_global(mix, w_then, num_steps=18 - k, state=state), whole[k:])
    # A state saved at an earlier step advances to k without starting over.
    early = tfdata.mixture_state(mix, G, 3, seed=SEED, shuffle_buffer=WINDOW)
    assert tfdata.mixture_state(mix, G, k, seed=SEED, shuffle_buffer=WINDOW, state=early) == state


@pytest.mark.slow
def test_reweighting_mid_run_and_resuming_after_it_replays_the_same_order(outputs):
    _, paths = outputs
    schedule = [{"step": 8, "weights": {"big": 0.1, "small": 0.1, "mid": 0.8}}]
    mix = _mixture(paths, schedule=schedule)
    whole = _global(mix, 1, num_steps=20)
    plain = _global(_mixture(paths), 1, num_steps=8)
    assert _same(whole[:8], plain)  # before the change: the unchanged order
    # From step 8 on, the new weights, within one at every position after the change.
    after = _source_of(np.concatenate(whole[8:]))
    _assert_within_one(after, [0.1, 0.1, 0.8])
    # Resume after the change, on 3 ranks: the same batches.
    state = tfdata.mixture_state(mix, G, 13, seed=SEED, shuffle_buffer=WINDOW)
    assert state["schedule"] == [[0, [0.6, 0.25, 0.15]], [8, [0.1, 0.1, 0.8]]]
    assert _same(_global(mix, 3, num_steps=7, state=state), whole[13:])
    # Re-weighting live: a run without the change stops at 8; resuming with it added continues as
    # the scheduled run, and no source repeats or skips a record within its epoch.
    live = tfdata.mixture_state(_mixture(paths), G, 8, seed=SEED, shuffle_buffer=WINDOW)
    resumed = _global(mix, 2, num_steps=12, state=live)
    assert _same(resumed, whole[8:])
    _assert_no_repeat_within_an_epoch(np.concatenate(plain + resumed))


def _at(step: int, weights) -> list:
    return [{"step": step, "weights": dict(zip(SIZES, weights, strict=True))}]


@pytest.mark.slow
def test_a_schedule_step_inside_a_window_reweights_from_that_very_step(outputs):
    _, paths = outputs
    mix = _mixture(paths, schedule=_at(5, [0.1, 0.1, 0.8]))  # inside the window of steps 4..7
    whole = _global(mix, 1, num_steps=18)
    assert _same(whole[:4], _global(_mixture(paths), 1, num_steps=4))  # the windows before it: unchanged
    # Steps before the schedule step hold the same records whatever the weights after it.
    other = _global(_mixture(paths, schedule=_at(5, [0.5, 0.0, 0.5])), 1, num_steps=18)
    assert _same(other[:5], whole[:5]) and not _same(other[5:6], whole[5:6])
    # The weights before and after it, within one at every position; no record twice within an epoch.
    _assert_within_one(_source_of(np.concatenate(whole[:5])), [WEIGHTS[n] for n in SIZES])
    _assert_within_one(_source_of(np.concatenate(whole[5:])), [0.1, 0.1, 0.8])
    _assert_no_repeat_within_an_epoch(np.concatenate(whole[:16]))  # 16: a window's end
    for w in (2, 3, 8):  # elastic
        assert _same(_global(mix, w, num_steps=18), whole), w
    for k, w in ((3, 2), (5, 3), (6, 4), (7, 1), (9, 8)):  # resume at k on w ranks, around the split
        state = json.loads(json.dumps(tfdata.mixture_state(mix, G, k, seed=SEED, shuffle_buffer=WINDOW)))
        assert _same(_global(mix, w, num_steps=18 - k, state=state), whole[k:]), k


@pytest.mark.slow
def test_reweighting_live_at_any_step_after_the_steps_already_dealt(outputs):
    _, paths = outputs
    plain = _mixture(paths)
    kw = dict(seed=SEED, shuffle_buffer=WINDOW)
    # Stopped at a window's start (4): the re-weighting may start at any later step, 6 included.
    state = tfdata.mixture_state(plain, G, 4, **kw)
    live = _mixture(paths, schedule=_at(6, [0.2, 0.2, 0.6]))
    assert _same(_global(live, 2, num_steps=10, state=state), _global(live, 1, num_steps=14)[4:])
    # Stopped inside a window (5, of steps 4..7 dealt together): from the window's end (8) on, at any step.
    state = tfdata.mixture_state(plain, G, 5, **kw)
    for step in (8, 9):
        live = _mixture(paths, schedule=_at(step, [0.2, 0.2, 0.6]))
        resumed = _global(live, 3, num_steps=11, state=state)  # to step 16, a window's end
        assert _same(resumed, _global(live, 1, num_steps=16)[5:]), step
        _assert_no_repeat_within_an_epoch(np.concatenate(_global(plain, 1, num_steps=5) + resumed))
    for step in (5, 6, 7):  # the steps 4..7 of the run were dealt without it: refused, naming the first allowed
        with pytest.raises(MixtureError, match="re-weight from step 8 on"):
            tfdata.make_dataset(_mixture(paths, schedule=_at(step, [0.2, 0.2, 0.6])), global_batch_size=G,
                                state=state, num_steps=1, **kw)
    # A run with a schedule step at 7 stopped at 6 (steps 4..6 dealt together): step 7 stays a schedule
    # step (its weights may change); removing it would deal steps 4..7 together.
    split = _mixture(paths, schedule=_at(7, [0.2, 0.2, 0.6]))
    state = tfdata.mixture_state(split, G, 6, **kw)
    changed = _mixture(paths, schedule=_at(7, [0.6, 0.2, 0.2]))
    assert _same(_global(changed, 2, num_steps=4, state=state), _global(changed, 1, num_steps=10)[6:])
    assert _same(_global(changed, 1, num_steps=6), _global(split, 1, num_steps=6))
    with pytest.raises(MixtureError, match="re-weight from step 7 on"):
        tfdata.make_dataset(plain, global_batch_size=G, state=state, num_steps=1, **kw)


def test_changing_the_past_or_the_sources_mid_run_is_a_clear_error(outputs):
    _, paths = outputs
    mix = _mixture(paths)
    state = tfdata.mixture_state(mix, G, 12, seed=SEED, shuffle_buffer=WINDOW)
    kw = dict(global_batch_size=G, seed=SEED, shuffle_buffer=WINDOW, num_steps=2)
    changed_past = _mixture(paths, schedule=[{"step": 4, "weights": {"big": 1, "small": 1, "mid": 1}}])
    with pytest.raises(MixtureError, match="step 4"):
        tfdata.make_dataset(changed_past, state=state, **kw)
    dropped = tfdata.Mixture.of([(n, paths[n], WEIGHTS[n]) for n in ("big", "mid")])
    with pytest.raises(MixtureError, match=r"\['small'\].*weight 0"):
        tfdata.make_dataset(dropped, state=state, **kw)
    # Removing through the schedule (weight 0 from the state's step) is fine.
    removed = _mixture(paths, schedule=[{"step": 12, "weights": {"big": 1, "small": 0, "mid": 1}}])
    ids = np.concatenate(_ids(tfdata.make_dataset(removed, state=state, **kw)))
    assert not (_source_of(ids) == 1).any()
    # Adding a source: only with weight 0 before the state's step.
    extra = dict(paths, more=paths["mid"])
    grown = tfdata.Mixture.of([(n, extra[n], 1.0) for n in (*SIZES, "more")])
    with pytest.raises(MixtureError, match="'more'.*weight 0 until"):
        tfdata.make_dataset(grown, state=state, **kw)
    grown_later = tfdata.Mixture.of(
        [(n, extra[n], WEIGHTS.get(n, 0.0)) for n in (*SIZES, "more")],
        schedule=[{"step": 12, "weights": {"big": 1, "small": 1, "mid": 1, "more": 1}}])
    assert len(_ids(tfdata.make_dataset(grown_later, state=state, **kw))) == 2
    reordered = tfdata.Mixture.of([(n, paths[n], WEIGHTS[n]) for n in ("mid", "big", "small")])
    with pytest.raises(MixtureError, match="another order"):
        tfdata.make_dataset(reordered, state=state, **kw)
    with pytest.raises(MixtureError, match="global_batch_size"):
        tfdata.make_dataset(mix, state=state, **{**kw, "global_batch_size": 12})


def test_model_fit_over_a_mixture(outputs):
    _, paths = outputs
    ds = tfdata.make_dataset(_mixture(paths), global_batch_size=G, seed=SEED, keras=True, features=(),
                             shuffle_buffer=WINDOW, num_steps=None)
    model = tf.keras.Sequential([tf.keras.layers.Embedding(VOCAB_SIZE, 4), tf.keras.layers.Dense(VOCAB_SIZE)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=2, steps_per_epoch=3, verbose=0)
    assert len(history.history["loss"]) == 2 and all(np.isfinite(history.history["loss"]))


def test_document_boundaries_and_input_context(outputs):
    _, paths = outputs
    mix = _mixture(paths)
    batch = next(iter(tfdata.make_dataset(mix, global_batch_size=G, seed=SEED, shuffle_buffer=WINDOW, num_steps=1)))
    assert batch["segment_ids"].shape == (G, SEQ_LEN) and batch["positions"].shape == (G, SEQ_LEN)
    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    ds = tfdata.make_dataset(mix, global_batch_size=G, input_context=ctx, seed=SEED, shuffle_buffer=WINDOW,
                             num_steps=2)
    per_replica = _ids(ds)
    whole = _global(mix, 1, num_steps=2)
    assert [len(b) for b in per_replica] == [G // 4] * 4
    assert np.array_equal(np.concatenate(per_replica[:2]), whole[0][G // 2 :])


# -- the description ----------------------------------------------------------------------------


def test_mixture_json_presets_and_validation(outputs, tmp_path):
    root, paths = outputs
    spec = {"format": "pile-mixture", "format_version": 1, "weights": "pile_paper",
            "sources": [{"manifest": os.path.relpath(paths[n], tmp_path)} for n in SIZES]}
    (tmp_path / "mixture.json").write_text(json.dumps(spec))
    mix = load_mixture(str(tmp_path / "mixture.json"))
    assert mix.names == tuple(SIZES)  # each output's one subset names it
    assert [s.weight for s in mix.sources] == [sum(SIZES[n]) * SEQ_LEN * 1.0 for n in SIZES]  # 1 epoch: unknown names
    absolute = {**spec, "weights": "tokens", "sources": [{"manifest": paths[n]} for n in SIZES]}
    assert [s.weight for s in load_mixture(absolute).sources] == [
        float(sum(SIZES[n]) * SEQ_LEN) for n in SIZES]
    other = str(root / "other")
    write_output(other, [10], seq_len=SEQ_LEN, tokenizer_sha256="1" * 64)
    with pytest.raises(MixtureError, match=rf"{paths['big']}.*and {other}.*tokenizer sha256"):
        tfdata.Mixture.of([("big", paths["big"], 1), ("other", other, 1)])
    longer = str(root / "longer")
    write_output(longer, [10], seq_len=16)
    with pytest.raises(MixtureError, match=rf"{longer}.*seq_len \(8 vs 16\)"):
        tfdata.Mixture.of([("big", paths["big"], 1), ("longer", longer, 1)])
    for bad, message in [
        ([("a", paths["big"], 1), ("a", paths["mid"], 1)], "more than once"),
        ([("a", paths["big"], 0)], "every weight is 0"),
        ([("a", paths["big"], -1)], ">= 0"),
        ([("a", str(root / "nowhere"), 1)], "No manifest"),
    ]:
        with pytest.raises(MixtureError, match=message):
            tfdata.Mixture.of(bad)
    with pytest.raises(MixtureError, match="leaves out"):
        _mixture(paths, schedule=[{"step": 4, "weights": {"big": 1}}])
    with pytest.raises(MixtureError, match="no source of"):
        _mixture(paths, schedule=[{"step": 4, "weights": {"big": 1, "small": 1, "mid": 1, "x": 1}}])


def test_a_damaged_source_shard_stops_every_rank_before_step_0_naming_it(outputs, tmp_path):
    import shutil

    _, paths = outputs
    copy = str(tmp_path / "mid")
    shutil.copytree(paths["mid"], copy)
    shard = os.path.join(copy, sorted(f for f in os.listdir(copy) if f.endswith(".tfrecord"))[1])
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 5)
    mix = tfdata.Mixture.of([("big", paths["big"], 1), ("mid", copy, 1)])
    for rank in range(2):
        with pytest.raises(tfdata.ShardIntegrityError, match=os.path.basename(shard)):
            tfdata.make_dataset(mix, global_batch_size=G, dp_rank=rank, dp_size=2, seed=SEED, num_steps=1)


def test_sources_on_a_filesystem_tensorflow_cannot_open_read_by_byte_range(outputs, tmp_path):
    import uuid

    import fsspec

    _, paths = outputs
    fs = fsspec.filesystem("memory")
    root = f"memory://mixture-{uuid.uuid4().hex}"
    remote = {}
    for name, local in paths.items():
        remote[name] = f"{root}/{name}"
        for f in os.listdir(local):
            with open(os.path.join(local, f), "rb") as src:
                fs.pipe(f"{remote[name]}/{f}", src.read())
    cache = tmp_path / "cache"
    cache.mkdir()
    try:
        expected = _global(_mixture(paths), 1, num_steps=9)
        got = _ids(tfdata.make_dataset(_mixture(remote), global_batch_size=G, seed=SEED, shuffle_buffer=WINDOW,
                                       num_steps=9, cache_dir=str(cache)))
        assert _same(got, expected)
    finally:
        fs.rm(root, recursive=True)


@pytest.mark.parametrize("resume", [0, 5])
def test_the_orders_start_is_never_pruned(monkeypatch, resume):
    """After many windows, the window of the start (step 0, or the resume point) is still known."""
    from pipeline.reader.engine import mixture as mixture_module

    monkeypatch.setattr(mixture_module, "_KEEP_WINDOWS", 2)
    kw = dict(seed=1, shuffle=True, window_steps=1)
    first = MixtureOrder(["a", "b"], [[40, 30], [50]], [(0, (0.5, 0.5))], 8, **kw)
    state = first.state(resume) if resume else None
    order = MixtureOrder(["a", "b"], [[40, 30], [50]], [(0, (0.5, 0.5))], 8, state=state, **kw)
    late = order.state(resume + 20)  # 20 windows walked: the others pruned
    assert order.state(resume) == first.state(resume)
    assert [x.tolist() for x in order.batch_records(resume)] == [x.tolist() for x in first.batch_records(resume)]
    assert late == first.state(resume + 20)
