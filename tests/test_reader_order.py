"""The reader's global order as pure NumPy: the same global batches for every world size, exact resumption
on another world size, and a shuffle whose quality holds to the end of the epoch.

Shuffle quality, the measure: the pipeline assigns every record a *source index* (its place in the
order the documents were read: file by file, line by line) and writes the records to shards by a
keyed permutation of it. For each tenth of an epoch (by global step), take the source indices of
the records the reader delivers there, normalized to [0, 1), and compute the Kolmogorov-Smirnov
distance D to the uniform distribution. A good shuffle draws every part of the epoch from the whole
corpus: D stays near the sampling noise, ~1/sqrt(n), in every tenth, the last one included. A
shuffle buffer over the source order fails this at the end of the epoch (its last batches come from
the end of the corpus), which the test shows, so the measure does see the complaint.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.core.shuffle import Permutation, ShardPlan
from pipeline.reader.engine import plan as P

RNG = np.random.default_rng(1234)


def rank_batches(order: P.GlobalOrder, dp_rank: int, dp_size: int, start_step: int = 0) -> list[list[tuple]]:
    """What the reader does with a rank's plan, in Python: read each run, gather, cut into batches."""
    plan = P.rank_plan(order, dp_rank, dp_size, start_step)
    out = []
    for w, batches, n, drop, first, count in plan.windows.tolist():
        run = [(s, f + i) for s, f, c in plan.reads[first : first + count].tolist() for i in range(c)]
        assert len(run) == n
        gather = P.window_gather(order.seed, order.epoch, order.shuffle, w, batches, plan.first_column,
                                 plan.batch_size)
        out += [run[i] for i in gather][drop:]
    b = plan.batch_size
    return [out[i : i + b] for i in range(0, len(out), b)]


def global_batch(order: P.GlobalOrder, step: int) -> list[tuple]:
    shards, recs = P.batch_records(order, step)
    return list(zip(shards.tolist(), recs.tolist(), strict=True))


@pytest.mark.parametrize("trial", range(6))
def test_every_world_size_gets_the_same_global_batches(trial):
    counts = RNG.integers(0, 90, RNG.integers(1, 12)).tolist() + [int(RNG.integers(30, 90))]
    g = int(RNG.choice([24, 48, 120]))
    shuffle = trial != 0
    order = P.global_order(counts, g, seed=int(RNG.integers(2**63)), epoch=trial, shuffle=shuffle,
                           window=int(RNG.integers(1, 400)))
    expected = [global_batch(order, k) for k in range(order.steps)]
    records = [r for b in expected for r in b]
    assert len(set(records)) == len(records) == order.steps * g  # no record twice in an epoch
    assert sum(counts) - len(records) < g
    for w in (1, 2, 3, 4, 8):
        for start in sorted({0, order.steps // 2, max(0, order.steps - 1)}):
            ranks = [rank_batches(order, r, w, start) for r in range(w)]
            joined = [sum(parts, []) for parts in zip(*ranks, strict=True)]
            assert joined == expected[start:], (w, start)


def test_runs_are_contiguous_and_about_window_over_w_records():
    counts = [4000] * 8  # shards longer than a window: a run crosses at most one shard boundary
    order = P.global_order(counts, 64, seed=3, window=2048)
    for w in (1, 2, 8):
        plan = P.rank_plan(order, w - 1, w)
        per_window = plan.windows[:, 2]
        assert per_window.max() <= 2048 // w and per_window.min() >= 2048 // w - 64 // w * 1
        # Each window's run is 1 read, or 2 where it crosses a shard boundary.
        assert plan.windows[:, 5].max() <= 2
        assert int(plan.reads[:, 2].sum()) == order.steps * 64 // w


def _source_index(seed: int, num_records: int, num_shards: int):
    """The pipeline's source index of (shard, record in shard), as its writer laid them out."""
    perm = Permutation(num_records, seed)
    bounds = ShardPlan(num_records, num_shards).bounds()

    def lookup(shards, recs):
        return perm.inverse(bounds[shards] + recs)

    counts = np.diff(bounds)
    return counts, lookup


def ks_uniform(x: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance between the sample x (in [0, 1)) and Uniform(0, 1)."""
    x = np.sort(x)
    n = len(x)
    return float(max((np.arange(1, n + 1) / n - x).max(), (x - np.arange(n) / n).max()))


def tenths_ks(positions_by_step: list[np.ndarray], total: int) -> list[float]:
    steps = len(positions_by_step)
    return [ks_uniform(np.concatenate(positions_by_step[steps * t // 10 : steps * (t + 1) // 10]) / total)
            for t in range(10)]


@pytest.mark.parametrize("seed,epoch", [(0, 0), (7, 1), (99, 5)])
def test_shuffle_quality_holds_to_the_end_of_the_epoch(seed, epoch):
    n, shards, g = 20_000, 16, 64
    counts, source = _source_index(seed, n, shards)
    order = P.global_order(counts, g, seed=seed + 1, epoch=epoch, window=2048)
    by_step = [source(*P.batch_records(order, k)) for k in range(order.steps)]
    d = tenths_ks(by_step, n)
    per_tenth = order.steps * g // 10
    bound = 1.95 / np.sqrt(per_tenth)  # KS critical value at 0.1%: noise, not structure
    assert max(d) < bound, d
    assert d[-1] < bound  # the last tenth as good as the others
    # Every global batch draws from the whole corpus too: its records' source indices spread wide.
    spread = np.array([np.ptp(b) / n for b in by_step])
    assert np.median(spread) > 0.9 and spread.min() > 0.5


def test_the_measure_catches_a_shuffle_buffer_degrading_at_the_end():
    n, buffer = 20_000, 2048
    rng = np.random.default_rng(0)
    held = list(range(buffer))
    out = []
    for nxt in range(buffer, n):  # tf.data's shuffle(buffer) over the source order
        i = int(rng.integers(len(held)))
        out.append(held[i])
        held[i] = nxt
    rng.shuffle(held)
    out += held
    d = tenths_ks([np.array(out[i : i + 64]) for i in range(0, n, 64)], n)
    assert d[-1] > 0.5  # the last tenth holds almost only the end of the corpus


def test_the_global_order_of_a_fixed_seed_epoch_and_window_does_not_change():
    # Checkpoints record positions in this order (plan.ORDER names it): any change to the shard
    # order, the rotation or a window's column picks must show here and come with a new ORDER.
    order = P.global_order([5, 3, 4, 6], 3, seed=2027, epoch=3, window=6)
    assert (order.steps, order.window_starts.tolist(), order.rotation, order.order.tolist()) == (
        6, [0, 2, 4, 6], 10, [2, 1, 3, 0])
    assert [global_batch(order, k) for k in range(order.steps)] == [
        [(3, 3), (3, 5), (0, 1)], [(3, 4), (0, 0), (0, 2)], [(0, 4), (2, 1), (2, 3)],
        [(0, 3), (2, 0), (2, 2)], [(1, 0), (3, 0), (3, 2)], [(1, 1), (1, 2), (3, 1)]]
    assert P.ORDER == "global-columns-1"
