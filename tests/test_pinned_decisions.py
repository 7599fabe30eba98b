"""Behaviours that decide data and that no other test pinned (each one's change passed the whole suite).

Columnar inputs: row numbers past the first Parquet row group, how a row group is cut into chunks
and numbered, the refusal of a row group of more than 4,096 chunks. The blend: weights with more
than 15 digits rounded to a pinned order; counts that do not add up refused in words. A mixture's
dealt order for a seed. MinHash: `optimal_bands` at several points, the hash functions of a seed
and the signatures they give (every dedup decision across versions depends on them). Literal
expected values: a change here changes users' data, and must be deliberate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core import blend as blend_module
from pipeline.core import minhash
from pipeline.core.blend import blend, counts_after, integer_weights
from pipeline.core.documents import BadRecord, Schema, parse_document
from pipeline.format.mixture import MixtureError
from pipeline.io import columnar
from pipeline.io.inputs import CorruptInputError
from pipeline.reader.engine.mixture import MixtureOrder

SCHEMA = Schema(default_subset="web", any_names=True)

# --- io/columnar.py ------------------------------------------------------------------------------


@pytest.fixture
def groups(tmp_path):
    """23 rows of 22-byte lines in row groups of 10, 10 and 3; row 18 (in the second group) null."""
    texts = [None if i == 17 else f"row {i:02d} text" for i in range(23)]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), path, row_group_size=10)
    return str(path)


def test_row_numbers_count_on_across_row_groups(groups):
    units = columnar.read_units(groups)
    assert [(u.index, u.first_row, u.rows) for u in units] == [(0, 0, 10), (1, 10, 10), (2, 20, 3)]
    lines = list(columnar.iter_lines(groups, SCHEMA))
    assert [(line.number, line.offset) for line in lines] == [(n, n - 1) for n in range(1, 24)]
    assert lines[17].data == b'{"text":null}'
    with pytest.raises(BadRecord) as bad:
        parse_document(lines[17], 1 << 20, SCHEMA)
    assert bad.value.reason == "text_not_string"
    # A row group read on its own numbers its rows as the whole file does.
    (alone,) = columnar.iter_unit_chunks(groups, 0, units[1], 1 << 20, SCHEMA)
    assert [line.number for line in alone.lines] == list(range(11, 21))


def test_a_row_group_is_cut_into_chunks_numbered_within_it(groups):
    units = columnar.read_units(groups)
    chunk_bytes = 2 * (22 + 1)  # two lines of 22 bytes (and their newlines) fill a chunk
    got = [[(c.file_index, c.chunk_index, [line.number for line in c.lines]) for c in
            columnar.iter_unit_chunks(groups, 3, unit, chunk_bytes, SCHEMA)] for unit in units]
    g = columnar.GROUP_CHUNKS
    assert g == 4096
    assert got == [
        [(3, 0, [1, 2]), (3, 1, [3, 4]), (3, 2, [5, 6]), (3, 3, [7, 8]), (3, 4, [9, 10])],
        # The null row's line is shorter: rows 17-19 fill one chunk.
        [(3, g, [11, 12]), (3, g + 1, [13, 14]), (3, g + 2, [15, 16]), (3, g + 3, [17, 18, 19]), (3, g + 4, [20])],
        [(3, 2 * g, [21, 22]), (3, 2 * g + 1, [23])],
    ]
    # The stored bytes of a group ride on its last chunk (progress), and only there.
    for unit in units:
        chunks = list(columnar.iter_unit_chunks(groups, 3, unit, chunk_bytes, SCHEMA))
        assert [c.input_bytes for c in chunks] == [0] * (len(chunks) - 1) + [unit.size]
    # The whole file at once: the same chunks.
    whole = list(columnar.iter_unit_chunks(groups, 3, None, chunk_bytes, SCHEMA))
    assert [(c.chunk_index, len(c.lines)) for c in whole] == [
        (c[1], len(c[2])) for per_group in got for c in per_group]


def test_a_chunk_is_cut_once_its_lines_reach_the_size_or_the_line_count(groups, monkeypatch):
    (first, *_) = columnar.read_units(groups)

    def cut(chunk_bytes):
        return [[line.number for line in c.lines]
                for c in columnar.iter_unit_chunks(groups, 0, first, chunk_bytes, SCHEMA)]

    # 2 x 23 bytes reach 46, not 47: each chunk then holds a third line.
    assert cut(46) == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]
    assert cut(47) == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    monkeypatch.setattr(columnar, "MAX_CHUNK_LINES", 4)
    assert cut(1 << 20) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]


def test_a_row_group_of_more_than_4096_chunks_is_refused(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": pa.array([f"r{i}" for i in range(4097)], pa.string())}), path,
                   row_group_size=5000)
    (unit,) = columnar.read_units(str(path))
    seen = []
    with pytest.raises(CorruptInputError, match="row group 0 makes more than 4096 chunks .*--chunk_mb"):
        for chunk in columnar.iter_unit_chunks(str(path), 0, unit, 1, SCHEMA):  # one line a chunk
            seen.append(chunk.chunk_index)
    assert seen == list(range(4096))  # refused before a chunk takes the next group's first number
    exact = tmp_path / "exact.parquet"
    pq.write_table(pa.table({"text": pa.array([f"r{i}" for i in range(4096)], pa.string())}), exact)
    (unit,) = columnar.read_units(str(exact))
    chunks = list(columnar.iter_unit_chunks(str(exact), 0, unit, 1, SCHEMA))
    assert len(chunks) == 4096 and chunks[-1].chunk_index == 4095


def test_a_columnar_file_is_never_read_in_stripes(groups):
    from pipeline.io.frames import Stripe

    with pytest.raises(ValueError, match="not in Stripes"):
        list(columnar.iter_unit_chunks(groups, 0, Stripe(0, 2, None), 1 << 20, SCHEMA))


# --- core/blend.py -------------------------------------------------------------------------------


def test_weights_of_more_than_15_digits_are_rounded_to_a_pinned_order():
    weights = [0.1234567890123456, 0.3, 1 / 3]
    p, q = integer_weights(weights)
    assert (p, q) == ([11479403531429, 27894950832427, 30994389813808], 70368744177664)
    assert blend(weights, 30).tolist() == [1, 2, 2, 1, 0, 2, 1, 2, 1, 2, 0, 1, 2, 1, 2, 1, 0, 2, 1, 2, 1, 2, 0, 2,
                                           1, 1, 2, 2, 0, 1]
    # Rounding to 2**-48 of the total gives the remainder to the largest fractional parts.
    assert integer_weights([1 / 3, 1 / 3, 1 / 3 + 1e-16]) == ([93824992236885, 93824992236885, 93824992236886],
                                                               1 << 48)
    assert integer_weights([0.2] * 4 + [0.2000000000000001]) == ([56294995342131] * 4 + [56294995342132], 1 << 48)
    assert blend_module.EXACT_DENOMINATOR == 10**15 and blend_module.QUANTUM == 1 << 48
    # Exact weights (15 digits or fewer) stay exact.
    assert integer_weights([0.001, 0.999]) == ([1, 999], 1000)
    assert blend([1 / 7, 2 / 7, 4 / 7], 21).tolist() == [2, 1, 2, 2, 0, 2, 1, 2, 1, 2, 2, 0, 2, 1, 2, 1, 2, 2, 0, 2, 1]
    counts = counts_after(blend(weights, 3000), 3)
    n = np.arange(1, 3001)[:, None]
    assert (np.abs(counts - n * np.array(p)[None, :] / q) < 1).all()


@pytest.mark.parametrize("start, counts", [(3, [5, 5]), (3, [1, 1]), (3, [3]), (-1, [0, -1])])
def test_counts_that_do_not_add_up_are_refused_in_words(start, counts):
    """A tampered state's counts: without the check, [5, 5] at 3 ran out of released sources (IndexError)."""
    with pytest.raises(ValueError, match="do not add up to start"):
        blend([1, 1], 5, start=start, counts=counts)


# --- reader/engine/mixture.py ----------------------------------------------------------------------

NAMES, SHARDS = ["a", "b", "c"], [[30, 20], [7], [25]]
SCHEDULE = [(0, (0.6, 0.25, 0.15)), (5, (0.2, 0.5, 0.3))]


def _order(**kw) -> MixtureOrder:
    return MixtureOrder(NAMES, SHARDS, SCHEDULE, 8, seed=2027, shuffle=True, window_steps=4, **kw)


def test_the_dealt_order_of_a_mixture_for_a_seed_does_not_change():
    """(source, shard, record) of every position of global steps 0-7: a resumed checkpoint depends on them."""
    order = _order()
    got = [[[int(x) for x in t] for t in zip(*order.batch_records(step), strict=True)] for step in range(8)]
    assert got == [
        [[0, 1, 2], [0, 1, 5], [1, 0, 3], [0, 1, 10], [2, 0, 19], [0, 1, 15], [1, 0, 0], [0, 1, 19]],
        [[0, 1, 1], [1, 0, 2], [0, 1, 7], [0, 1, 9], [2, 0, 18], [0, 1, 13], [1, 0, 6], [0, 1, 17]],
        [[0, 1, 3], [1, 0, 1], [0, 1, 6], [2, 0, 17], [0, 1, 11], [0, 1, 14], [1, 0, 0], [0, 0, 0]],
        [[2, 0, 16], [0, 1, 4], [1, 0, 4], [0, 1, 8], [0, 1, 12], [1, 0, 5], [0, 1, 16], [0, 1, 18]],
        [[2, 0, 20], [0, 0, 1], [1, 0, 1], [0, 0, 2], [0, 0, 3], [1, 0, 2], [0, 0, 4], [2, 0, 21]],
        [[1, 0, 5], [2, 0, 23], [1, 0, 5], [0, 0, 6], [1, 0, 0], [2, 0, 1], [1, 0, 3], [0, 0, 8]],
        [[1, 0, 3], [2, 0, 22], [1, 0, 6], [2, 0, 24], [1, 0, 1], [0, 0, 7], [1, 0, 4], [2, 0, 3]],
        [[1, 0, 4], [0, 0, 5], [1, 0, 6], [2, 0, 0], [1, 0, 2], [2, 0, 2], [1, 0, 5], [0, 0, 9]],
    ]
    resumed = _order(state=order.state(6))
    assert [[int(x) for x in t] for t in zip(*resumed.batch_records(6), strict=True)] == got[6]


@pytest.mark.parametrize("key, change", [
    ("counts_at_window", lambda v: [v[0] + 3, v[1], v[2]]),  # 3 samples more than the window's start holds
    ("counts_at_window", lambda v: [v[0] - 40, v[1], v[2] + 40]),  # adds up, but a count below 0
    ("segment_counts", lambda v: [v[0] + 1, v[1], v[2]]),
    ("counts_at_window", lambda v: v[:2]),
    ("counts_at_window", lambda v: ["x", 1, 2]),
])
def test_a_tampered_mixture_state_is_one_mixture_error(key, change):
    state = _order().state(6)
    state[key] = change(state[key])
    with pytest.raises(MixtureError, match="the state's counts"):
        _order(state=state).batch_records(6)


# --- core/minhash.py -----------------------------------------------------------------------------


@pytest.mark.parametrize("threshold, num_perm, fp, fn, expected", [
    (0.87, 128, 0.5, 0.5, (7, 18)), (0.5, 128, 0.5, 0.5, (25, 5)), (0.7, 64, 0.5, 0.5, (8, 8)),
    (0.8, 128, 0.5, 0.5, (9, 13)), (0.9, 256, 0.5, 0.5, (9, 28)), (0.87, 128, 0.9, 0.1, (4, 32)),
    (0.87, 128, 0.1, 0.9, (10, 12)), (0.6, 9, 0.5, 0.5, (3, 3)),
])
def test_optimal_bands_at_several_points(threshold, num_perm, fp, fn, expected):
    assert minhash.optimal_bands(threshold, num_perm, fp, fn) == expected


def test_the_hash_functions_of_a_seed_do_not_change():
    keys = minhash.MinHasher(num_perm=6, seed=1).keys
    assert [hex(int(x)) for x in keys[0]] == ["0xeb99eb32b065efd5", "0x8df73e49fb4a1b11", "0x6c879d28e8261341",
                                              "0xa7dbb8de90b4c22f", "0xe3d75a82e9f83f9b", "0xad17619c38dd9edf"]
    assert [hex(int(x)) for x in keys[1]] == ["0x748604874dd99f", "0x2d87288d66075ffa", "0x31fee8a43c6220e0",
                                              "0x7d2e8272a6f0f373", "0x75b22094ab238c37", "0xbd8391c902825a8d"]
    assert all(int(a) & 1 for a in keys[0])  # odd multipliers: bijections of 64-bit words
    assert [hex(int(x)) for x in minhash.MinHasher(num_perm=6, seed=7).keys[0]] == [
        "0x111ef9dd3c9b9c8d", "0xe9f4187bb61ca7ed", "0xab2509eeebe45bdb", "0x1244af8cf5073a7d", "0x4852fb445b2c199f",
        "0x684814cdcfaaf1a9"]


def test_the_signatures_of_a_seed_do_not_change():
    shingles = np.array([1, 2, 3, 10**12, 2**63 + 5, 2**64 - 1], np.uint64)
    one = minhash.MinHasher(num_perm=8, seed=1).signature(shingles)
    assert one.tolist() == [154320649, 187023548, 153781099, 221971334, 308167704, 560730850, 1221498446, 159225841]
    assert minhash.MinHasher(num_perm=8, seed=3).signature(shingles).tolist() == [
        1202781033, 577627277, 1072239977, 1120024453, 2344164373, 339232772, 529921365, 87926643]
    # Several blocks of shingles (BLOCK = 2048): the minimum over all of them.
    assert minhash.MinHasher(num_perm=8, seed=1).signature(np.arange(5000, dtype=np.uint64)).tolist() == [
        241820, 719616, 1033758, 4540915, 79811, 108404, 250431, 991960]
    assert minhash.band_key_ints(one, 2, 4) == [1828981431107398550, -521624259676135289]
    assert minhash.MinHasher(num_perm=4).signature(np.empty(0, np.uint64)).tolist() == [0xFFFFFFFF] * 4
