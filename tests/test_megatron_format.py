"""Megatron's indexed dataset, our side (pipeline/format/megatron.py): index bytes, shard layout, data paths.

The files' compatibility with Megatron's own code is checked in tests/test_megatron_compat.py.
"""

import doctest
import struct

import numpy as np
import pytest

from pipeline.core.subsets import PILE_SUBSETS
from pipeline.format import megatron as fmt


def test_doctests():
    assert doctest.testmod(fmt).failed == 0


@pytest.mark.parametrize(("vocab", "dtype", "code"), [(600, "uint16", 8), (32000, "uint16", 8),
                                                      (65499, "uint16", 8), (65500, "int32", 4),
                                                      (128256, "int32", 4)])
def test_token_dtype_is_megatrons_optimal_dtype(vocab, dtype, code):
    # megatron.core.datasets.indexed_dataset.DType.optimal_dtype: uint16 if cardinality < 65500.
    assert fmt.token_dtype(vocab).name == dtype
    assert fmt.dtype_code(fmt.token_dtype(vocab)) == code


def test_index_layout_field_by_field():
    lengths = np.array([3, 1, 70000])
    for dtype in (np.dtype("<u2"), np.dtype("<i4")):
        data = b"".join(fmt.index_parts(lengths, dtype))
        assert data[:9] == b"MMIDIDX\x00\x00"
        version, code, n, d = struct.unpack_from("<QBQQ", data, 9)
        assert (version, code, n, d) == (1, fmt.dtype_code(dtype), 3, 4)
        body = data[34:]
        assert np.frombuffer(body[:12], "<i4").tolist() == [3, 1, 70000]
        size = dtype.itemsize
        assert np.frombuffer(body[12:36], "<i8").tolist() == [0, 3 * size, 4 * size]
        assert np.frombuffer(body[36:], "<i8").tolist() == [0, 1, 2, 3]
        index = fmt.read_index(data)
        assert index.dtype == dtype and index.bin_bytes == 70004 * size


def test_index_of_many_documents_is_written_in_blocks(monkeypatch):
    monkeypatch.setattr(fmt, "_BLOCK", 7)
    lengths = np.arange(1, 51)
    parts = list(fmt.index_parts(lengths, np.dtype("<u2")))
    assert len(parts) > 10
    index = fmt.read_index(b"".join(parts))
    assert index.lengths.tolist() == lengths.tolist()
    assert index.pointers.tolist() == (2 * (np.cumsum(lengths) - lengths)).tolist()
    assert index.document_indices.tolist() == list(range(51))


def test_empty_index_and_bad_lengths():
    assert fmt.read_index(b"".join(fmt.index_parts(np.zeros(0, int), np.dtype("<u2")))).document_indices.tolist() == [0]
    for bad in ([0], [-1], [2**31]):
        with pytest.raises(ValueError, match="lengths"):
            list(fmt.index_parts(np.array(bad), np.dtype("<i4")))


def test_read_index_refuses_damaged_files():
    good = b"".join(fmt.index_parts(np.array([2, 5]), np.dtype("<u2")))
    with pytest.raises(fmt.BadIndex, match="not a Megatron index"):
        fmt.read_index(b"X" + good[1:])
    with pytest.raises(fmt.BadIndex, match="do not hold"):
        fmt.read_index(good[:-8])
    tampered = bytearray(good)
    tampered[34 + 8 + 8] = 99  # the second pointer
    with pytest.raises(fmt.BadIndex, match="inconsistent"):
        fmt.read_index(bytes(tampered))


def test_subset_slugs_are_distinct_file_name_parts():
    slugs = [fmt.subset_slug(s) for s in PILE_SUBSETS]
    assert len(set(slugs)) == 22
    assert all(s.replace("_", "").isalnum() for s in slugs)
    assert fmt.prefix_name("train", "Gutenberg_PG_19", 1, 3) == "train-Gutenberg_PG_19-00001-of-00003"
    assert fmt.prefix_name("val", "", 0, 1) == "val-00000-of-00001"
    names = fmt.shard_names([(s, 0) for s in PILE_SUBSETS], "train")
    assert names[("Gutenberg (PG-19)", 0)] == "train-Gutenberg_PG_19-00000-of-00001"


def test_names_of_any_subsets_never_collide():
    # With --subset_names any, two names can make the same file-name part: each gets a hash of its name.
    groups = ["a b", "a_b", "a-b", "\u6570\u636e", "\u65e5\u672c", "forum"]
    names = fmt.shard_names([(g, slot) for g in groups for slot in (0, 5)], "train")
    assert len(set(names.values())) == len(names) == 12
    assert names[("forum", 5)] == "train-forum-00001-of-00002"
    from pipeline.io.outputs import is_run_file, run_path

    run_id = "0123456789abcdef"
    assert all(is_run_file(run_path(run_id, f"{n}.bin")) and is_run_file(run_path(run_id, f"{n}.idx"))
               for n in names.values())


def test_layout_offsets_restart_per_group_and_follow_key_order():
    keys = [fmt.source_key(c, f, k) for c, f, k in [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]]
    assert keys == sorted(keys)
    rows = np.array([[k, n, 10 * n] for k, n in zip(keys, [2, 3, 4, 5], strict=True)])
    layout = fmt.Layout.from_counts([{"A": rows[2:], "B": rows[:1]}, {"A": rows[:2][::-1]}])  # any order
    assert [layout.offsets("A", k) for k in keys] == [(0, 0), (2, 20), (5, 50), (9, 90)]
    assert layout.offsets("B", keys[0]) == (0, 0)
    with pytest.raises(KeyError):
        layout.offsets("B", keys[1])
    with pytest.raises(KeyError):
        layout.offsets("C", keys[0])
    with pytest.raises(ValueError, match="twice"):
        fmt.Layout.from_counts([{"A": rows}, {"A": rows[:1]}])
    with pytest.raises(ValueError, match="copy"):
        fmt.source_key(200, 0, 0)


def test_shards_are_bounded_and_numbered_densely():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 300, 2000)
    sizes[100] = 5000  # longer than a shard: the slot after it holds no document start
    slots = fmt.shard_slots(0, sizes, 1000)
    assert (np.diff(slots) >= 0).all()
    for slot in np.unique(slots):
        in_slot = sizes[slots == slot]
        assert in_slot[:-1].sum() < 1000  # all but the last document start inside the slot
    names = fmt.shard_names([("", int(s)) for s in slots], "train")
    count = len(names)
    assert sorted(names.values()) == [f"train-{i:05d}-of-{count:05d}" for i in range(count)]
    assert count < slots.max() + 1


def _manifest(per_subset=True, epochs=None):
    shards = [{"path": "t-ArXiv-00000-of-00001", "subset": "ArXiv", "tokens": 300},
              {"path": "t-Wikipedia_en-00000-of-00002", "subset": "Wikipedia (en)", "tokens": 100},
              {"path": "t-Wikipedia_en-00001-of-00002", "subset": "Wikipedia (en)", "tokens": 50}]
    return {"shards": shards, "megatron": {"per_subset": per_subset}, "config": {"epochs": epochs or {}}}


def test_blend_weights_are_tokens_times_epochs():
    assert fmt.blend(_manifest()) == [(300, "t-ArXiv-00000-of-00001"), (100, "t-Wikipedia_en-00000-of-00002"),
                                      (50, "t-Wikipedia_en-00001-of-00002")]
    weighted = fmt.blend(_manifest(), {"ArXiv": 2.0, "Wikipedia (en)": 3.0})
    assert [w for w, _ in weighted] == [600, 300, 150]
    assert fmt.data_path(weighted, "s3://b/out") == ("600 s3://b/out/t-ArXiv-00000-of-00001 300 "
                                                     "s3://b/out/t-Wikipedia_en-00000-of-00002 150 "
                                                     "s3://b/out/t-Wikipedia_en-00001-of-00002")
    assert fmt.data_path([(2.5, "p"), (0, "q")], style="nemo") == "[2.5,p]"  # zero weight: left out
    with pytest.raises(ValueError, match="per_subset"):
        fmt.blend(_manifest(per_subset=False), {"ArXiv": 2.0})
    with pytest.raises(ValueError, match="already holds"):
        fmt.blend(_manifest(epochs={"ArXiv": 2.0}), {"ArXiv": 2.0})


def test_the_summary_ends_its_table_with_a_total_row():
    subsets = {"ArXiv": {"documents": 3, "kept": 2, "filtered": {"empty": 1}, "tokens": 40, "tokens_with_epochs": 80,
                         "text_bytes": 2_000_000},
               "Github": {"documents": 5, "kept": 5, "filtered": {}, "tokens": 60, "tokens_with_epochs": 60,
                          "text_bytes": 1_500_000}}
    manifest = {"subsets": subsets, "totals": {"documents": 7, "tokens": 100, "bytes": 300},
                "dead_letters": {"records": 0, "by_reason": {}}, "megatron": {"dtype": "uint16"},
                "shards": [{"tokens": 100, "subset": None, "path": "run-0123456789abcdef/train-00000-of-00001"}]}
    table = fmt.format_summary(manifest).split("\n\n")[0].splitlines()
    assert table[-2].startswith("---") and table[-1].split() == ["total", "8", "7", "1", "100", "140", "3.50"]
