import hashlib

import numpy as np
import pytest

from pipeline.core.shuffle import Permutation, ShardPlan


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 64, 65, 1000, 4097])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_permutation_is_a_bijection(n, seed):
    p = Permutation(n, seed)
    out = p(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    assert p.inverse(out).tolist() == list(range(n))


def test_permutation_depends_on_seed_and_is_stable():
    a = Permutation(1000, 0)(np.arange(1000))
    assert np.array_equal(a, Permutation(1000, 0)(np.arange(1000)))
    assert not np.array_equal(a, Permutation(1000, 1)(np.arange(1000)))
    # Piecewise evaluation (as workers do, per source) equals evaluating everything at once.
    parts = np.concatenate([Permutation(1000, 0)(np.arange(i, i + 100)) for i in range(0, 1000, 100)])
    assert np.array_equal(a, parts)
    # It actually shuffles: few fixed points, far from the identity.
    assert (a == np.arange(1000)).sum() < 20


@pytest.mark.parametrize("num_records,record_bytes,shard_bytes", [(0, 10, 100), (1, 10, 100), (10, 10, 100),
                                                                 (11, 10, 100), (1000, 4137, 1 << 20),
                                                                 (5, 500, 100)])
def test_shard_plan_respects_the_size_bound(num_records, record_bytes, shard_bytes):
    plan = ShardPlan.for_size(num_records, record_bytes, shard_bytes)
    counts = np.bincount(plan.shard_of(np.arange(num_records)), minlength=plan.num_shards)
    assert counts.sum() == num_records
    per_shard = max(1, shard_bytes // record_bytes)
    assert (counts <= per_shard).all()
    if num_records:
        assert counts.max() - counts.min() <= 1
        # The fewest shards that respect the bound.
        assert plan.num_shards == -(-num_records // per_shard)


@pytest.mark.parametrize("n", [1, 10, 64, 1000])
def test_an_index_or_position_outside_the_range_is_refused(n):
    # Index n would walk onto a position another index already has: two records in one place.
    p = Permutation(n, 7)
    assert p.inverse(p(np.arange(n))).tolist() == list(range(n))
    for bad in (n, [0, n], n + 1):
        with pytest.raises(ValueError, match=r"index out of range \[0, "):
            p(bad)
        with pytest.raises(ValueError, match=r"position out of range \[0, "):
            p.inverse(bad)


def _textbook(n: int, seed: int, values, inverse: bool = False) -> np.ndarray:
    """The permutation written plainly (whole arrays, new arrays each step): what the fast one must equal."""
    from pipeline.core.hashing import mix64, stable_hash

    bits = max(2, int(n - 1).bit_length() if n > 1 else 2)
    bits += bits % 2
    half, mask = np.uint64(bits // 2), np.uint64((1 << (bits // 2)) - 1)
    keys = [np.uint64(k) for k in stable_hash("shuffle", seed, words=4)]

    def step(x):
        left, right = x >> half, x & mask
        for key in (reversed(keys) if inverse else keys):
            if inverse:
                left, right = right ^ (mix64(left ^ key) & mask), left
            else:
                left, right = right, left ^ (mix64(right ^ key) & mask)
        return (left << half) | right

    y = step(np.asarray(values, np.uint64))
    while (outside := y >= np.uint64(n)).any():
        y[outside] = step(y[outside])
    return y.astype(np.int64)


@pytest.mark.parametrize("n", [2, 1000, (1 << 15) + 3, 200_003])
@pytest.mark.parametrize("seed", [0, 7])
def test_permutation_equals_the_textbook_feistel_network(n, seed):
    # Blocks of 32,768 values, each walked on its own, change no value: across block boundaries, in
    # any order of the input, forwards and backwards.
    p = Permutation(n, seed)
    values = np.random.default_rng(seed).permutation(n)
    positions = p(values)
    assert np.array_equal(positions, _textbook(n, seed, values))
    assert np.array_equal(p.inverse(values), _textbook(n, seed, values, inverse=True))
    assert np.array_equal(p.inverse(positions), values)
    assert p(np.int64(values[0])).shape == () and int(p(np.int64(values[0]))) == positions[0]


def test_permutation_values_are_pinned():
    # The shuffle decides every record's shard and place: a change of these bytes changes every output.
    positions = Permutation(1_000_003, 5)(np.arange(1_000_003))
    assert positions[:6].tolist() == [125015, 970598, 54173, 549812, 608840, 30226]
    assert hashlib.sha256(positions.astype("<i8").tobytes()).hexdigest()[:16] == "c607652ebdab0aa5"
