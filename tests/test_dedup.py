"""Dedup's pure rules: n-grams, MinHash and its S-curve, the star rounds of connected components, eval n-grams."""

import doctest
import tracemalloc

import numpy as np
import pytest

from pipeline.core import dedup, minhash, ngrams


@pytest.mark.parametrize("module", [dedup, minhash, ngrams])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def test_order_key_orders_by_file_then_line():
    keys = [dedup.order_key(f, line) for f, line in [(0, 5), (0, 7), (1, 1), (2, 0)]]
    assert keys == sorted(keys)
    assert [dedup.order_parts(k) for k in keys] == [(0, 5), (0, 7), (1, 1), (2, 0)]
    with pytest.raises(ValueError, match="out of range"):
        dedup.order_key(0, 1 << 40)


def test_normalizations():
    assert ngrams.exact_key("a  b\n", "none") != ngrams.exact_key("a b", "none")
    assert ngrams.exact_key("a  b\n") == ngrams.exact_key("a b")
    assert ngrams.exact_key("e\u0301", "nfc") == ngrams.exact_key("\u00e9", "nfc")
    assert ngrams.exact_key("e\u0301", "none") != ngrams.exact_key("\u00e9", "none")
    with pytest.raises(ValueError, match="normalization must be one of"):
        ngrams.normalize("x", "nfkc")


def test_ngram_hashes_see_order_and_not_case_or_punctuation():
    a = ngrams.shingles("The quick brown fox jumps", 3)
    assert np.array_equal(a, ngrams.shingles("the QUICK, brown... fox jumps!", 3))
    assert not np.array_equal(a, ngrams.shingles("quick the brown fox jumps", 3))
    assert len(ngrams.shingles("", 3)) == 0


def test_near_dedups_word_hashes_are_those_of_each_word_found_by_the_regex():
    # numpy over code points must find exactly `words`' words (NFC, lower-cased, \w runs), in order.
    rng = np.random.default_rng(5)
    alphabet = list("ab Z_9 \n\t.,'-") + ["e\u0301", "\u0130", "\u00df", "\u03a3", "\u4e2d", "\U0001f600",
                                           "\ud83d", "\u00a0", "\u2028", "\u0663", "\u00b2", "\u02b0"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet, rng.integers(0, 60)))
        want = np.array([ngrams.word_hash(w) for w in ngrams.words(text)], np.uint64)
        assert np.array_equal(ngrams.text_word_hashes(text), want), repr(text)
    long_word = "x" * 5000 + " y"
    assert len(ngrams.text_word_hashes(long_word)) == 2
    assert ngrams.text_word_hashes(long_word)[0] == ngrams.word_hash("x" * 5000)


def test_a_repeated_shingle_leaves_the_signature_as_it_is():
    grams = ngrams.ngram_hashes(ngrams.text_word_hashes("a b c d e f a b c d e f a b c d e f g"), 3)
    hasher = minhash.MinHasher(32, 2)
    assert len(np.unique(grams)) < len(grams)
    assert np.array_equal(hasher.signature(grams), hasher.signature(np.unique(grams)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_minhash_estimates_jaccard(seed):
    rng = np.random.default_rng(seed)
    universe = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    hasher = minhash.MinHasher(num_perm=256, seed=seed)
    for overlap in (500, 1500, 2500):
        a, b = np.unique(universe[:2000]), np.unique(universe[2000 - overlap : 4000 - overlap])
        true = minhash.jaccard(a, b)
        est = minhash.estimate_jaccard(hasher.signature(a), hasher.signature(b))
        assert abs(est - true) < 0.1, (overlap, true, est)


def test_signature_does_not_depend_on_blocks_or_order():
    x = np.arange(10_000, dtype=np.uint64) * np.uint64(7919)
    hasher = minhash.MinHasher(64, 3)
    assert np.array_equal(hasher.signature(x), hasher.signature(x[::-1].copy()))
    assert np.array_equal(hasher.signature(x), hasher.signature(np.concatenate([x, x])))


def test_s_curve_defaults_match_a_087_threshold():
    assert minhash.optimal_bands(0.87, 128) == (7, 18)
    p = minhash.collision_probability(np.array([0.5, 0.87, 0.95, 0.99]), 7, 18)
    assert p[0] < 1e-4 and 0.4 < p[1] < 0.5 and p[2] > 0.95 and p[3] > 0.9999


def test_band_keys_differ_by_band():
    sig = np.zeros(126, np.uint32)
    keys = minhash.band_keys(sig, 7, 18)
    assert len(set(keys.tolist())) == 7  # equal values in two bands are still two buckets
    other = sig.copy()
    other[18 * 3 + 5] = 1  # one value of band 3 differs: only that band's bucket differs
    assert (minhash.band_keys(other, 7, 18) != keys).tolist() == [False, False, False, True, False, False, False]


def _random_graph(rng, nodes, edges):
    pairs = rng.integers(0, nodes, (edges, 2))
    return {(int(u), int(v)) for u, v in pairs if u != v}


@pytest.mark.parametrize("seed", range(6))
def test_star_rounds_reach_the_components(seed):
    rng = np.random.default_rng(seed)
    graph = _random_graph(rng, 300, int(rng.integers(50, 400)))
    expected = dedup.components(graph)
    edges, rounds = set(graph), 0
    while True:
        nxt = dedup.star_round(edges)
        rounds += 1
        if nxt == edges:
            break
        edges = nxt
    assert dedup.is_star_forest(edges)
    assert dict(edges) == expected
    assert rounds <= 12


def test_a_path_converges_in_few_rounds():
    edges = {(i + 1, i) for i in range(1000)}  # the worst shape for label propagation: 1000 rounds there
    for _ in range(10):
        edges = dedup.star_round(edges)
    assert dedup.is_star_forest(edges) and dict(edges) == {i: 0 for i in range(1, 1001)}


class _Lazy:
    """A re-iterable group that never exists as a list: what Dataflow's grouped values are."""

    def __init__(self, n, make=int):
        self.n, self.make = n, make

    def __iter__(self):
        return (self.make(i) for i in range(self.n))


def _peak(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_reducers_hold_one_element_whatever_the_group():
    """A bucket, a star or a cluster of 200,000 copies: each reducer's memory stays under 64 KiB.

    Holding even one byte per member would pass the bound three times over (traced, so kept small).
    """
    n = 200_000
    out = {"edges": 0}

    def drain(gen):
        for _ in gen:
            out["edges"] += 1

    assert _peak(lambda: drain(dedup.bucket_star(_Lazy(n, lambda i: i + 5)))) < 64 << 10
    assert _peak(lambda: drain(dedup.large_star(3, _Lazy(n)))) < 64 << 10
    assert _peak(lambda: drain(dedup.small_star(n, _Lazy(n)))) < 64 << 10
    assert out["edges"] == (n - 1) + (n - 4) + n


def test_matches_and_cuts():
    text = "one two three four five six"
    tokens, spans = ngrams.word_spans(text)
    grams = ngrams.ngram_hashes(ngrams.word_hashes(tokens), 2)
    evals = np.sort(ngrams.ngram_hashes(ngrams.word_hashes(["three", "four"]), 2))
    found = dedup.matches(grams, evals)
    assert found.tolist() == [2]
    assert dedup.cut_text(text, dedup.cut_spans(spans, found, 2)) == "one two  five six"


@pytest.mark.parametrize("seed", range(4))
def test_small_star_over_large_stars_repeats_gives_the_rounds_edges(seed):
    """The Beam round skips Distinct between its two steps: repeats must not change small-star's edges."""
    rng = np.random.default_rng(seed)
    edges = _random_graph(rng, 200, 300)
    grouped: dict[int, list[int]] = {}
    for u, v in (p for e in edges for p in dedup.large_star_map(e)):
        grouped.setdefault(u, []).append(v)
    large = [e for u, vs in grouped.items() for e in dedup.large_star(u, vs)]  # with its repeats
    assert len(large) <= len(edges) and len(large) > len(set(large))
    smaller: dict[int, list[int]] = {}
    for u, v in map(dedup.small_star_map, large):
        smaller.setdefault(u, []).append(v)
    assert {e for u, vs in smaller.items() for e in dedup.small_star(u, vs)} == dedup.star_round(edges)


def _round_with_repeats(edges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The Beam round: large-star then small-star, grouping lists (repeats kept), no Distinct."""
    grouped: dict[int, list[int]] = {}
    for u, v in (p for e in edges for p in dedup.large_star_map(e)):
        grouped.setdefault(u, []).append(v)
    large = [e for node, vs in grouped.items() for e in dedup.large_star(node, vs)]
    smaller: dict[int, list[int]] = {}
    for u, v in map(dedup.small_star_map, large):
        smaller.setdefault(u, []).append(v)
    return [e for node, vs in smaller.items() for e in dedup.small_star(node, vs)]


@pytest.mark.parametrize("seed", range(6))
def test_rounds_without_distinct_keep_the_reference_edges_and_never_grow(seed):
    """StarRound has no Distinct: at every round the same edge set as the set-based rounds, no more elements."""
    rng = np.random.default_rng(seed)
    graphs = [_random_graph(rng, int(rng.integers(5, 80)), int(rng.integers(5, 300))) for _ in range(50)]
    graphs.append({(i + 1, i) for i in range(300)})
    repeats = 0
    for graph in graphs:
        reference, edges = set(graph), sorted(graph)
        for _ in range(10):
            reference, edges = dedup.star_round(reference), _round_with_repeats(edges)
            assert set(edges) == reference
            assert len(edges) <= len(graph)
            repeats += len(edges) > len(set(edges))
    assert repeats  # the case the claim is about did occur


def test_bucket_stars_are_every_buckets_star():
    rng = np.random.default_rng(11)
    for n, buckets, width in ((0, 1, 1), (1, 1, 1), (200, 30, 1), (500, 7, 2), (300, 300, 2)):
        keys = rng.integers(-5, 5, (n, width)) * rng.integers(1, 1 << 40, width) if n else np.zeros((0, width))
        keys = keys % buckets if width == 1 else keys
        members = rng.permutation(10 * n + 1)[:n].astype(np.int64)
        members[: n // 10] = members[n // 10 : 2 * (n // 10)]  # a member in several buckets, or twice in one
        got = dedup.bucket_stars(keys.reshape(n, width), members)
        by_bucket: dict = {}
        for key, member in zip(map(tuple, keys.reshape(n, width).tolist()), members.tolist(), strict=True):
            by_bucket.setdefault(key, []).append(member)
        want = sorted(edge for members_ in by_bucket.values() for edge in dedup.bucket_star(members_))
        assert sorted(zip(got[0].tolist(), got[1].tolist(), strict=True)) == want
