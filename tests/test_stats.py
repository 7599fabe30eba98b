"""The job's typed stats: merged by a method, their manifest form (what shows when), read back."""

import pytest

from pipeline.core.documents import file_stats
from pipeline.core.stats import JobStats, PackingStats, SubsetStats, merge_stats


def test_a_subset_s_manifest_form_shows_a_field_once_it_is_set_or_counted():
    s = SubsetStats()
    assert s.to_json() == {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0}
    s.add_written(0, 1, None)  # a document of no tokens written: `tokens` shows, at 0
    assert s.to_json()["tokens"] == 0 and s.to_json()["tokens_with_epochs"] == 0
    listing = JobStats().subset("ArXiv", lists_removed=True)
    assert listing.to_json() == {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0, "removed": {},
                                 "removed_tokens": {}}
    listing.add_removed("dedup")
    listing.add_removed_tokens("dedup", 7)
    listing.add_cut(["c_cut", "c_cut"])
    assert listing.to_json() == {
        "documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0, "removed": {"dedup": 1},
        "removed_tokens": {"dedup": 7}, "cut": 1, "cut_by_reason": {"c_cut": 2}}


def test_merging_sums_every_count_and_shares_nothing_with_its_parts():
    a = JobStats(lines=3, dead_letters={"invalid_json": 1}, inputs={0: {"path": "a", "lines": 3}})
    a.subset("Pile-CC").add_written(5, 2, {"language": "en"})
    b = JobStats(lines=4, inputs={0: {"path": "a", "lines": 4}, 1: {"path": "b", "lines": 0}},
                 packing=PackingStats(records_from_tails=2))
    b.subset("Pile-CC").add_written(4, 1, {"language": "en"})
    b.subset("ArXiv").filtered["empty_text"] = 1
    total = merge_stats([a, b.to_json()])  # a part may be the JSON form (the read stage's)
    assert total.lines == 7 and total.dead_letters == {"invalid_json": 1}
    assert total.inputs == {0: {"path": "a", "lines": 7}, 1: {"path": "b", "lines": 0}}
    pile = total.subsets["Pile-CC"]
    assert (pile.tokens, pile.tokens_with_epochs) == (9, 14)
    assert pile.labels == {"language": {"en": {"documents": 2, "tokens": 9}}}
    assert total.manifest_packing() == {"records_from_tails": 2}
    total.subsets["Pile-CC"].labels["language"]["en"]["documents"] = 99
    total.inputs[0]["lines"] = 0
    assert a.subsets["Pile-CC"].labels["language"]["en"]["documents"] == 1 and a.inputs[0]["lines"] == 3
    assert JobStats.from_json(total.to_json()) == total
    assert merge_stats([merge_stats([a]), b]) == merge_stats([a, b]) == merge_stats([b, a])


def test_the_read_stage_s_dicts_and_the_inputs_order():
    read = JobStats.of({"inputs": {"99999": {"path": "c", "lines": 1}, "100000": {"path": "z", "lines": 2}}})
    assert set(read.inputs) == {99999, 100000}
    # Ordered by the five-digit key, as manifests list them.
    assert [i["path"] for i in read.manifest_inputs(file_stats())] == ["z", "c"]
    assert read.manifest_inputs(file_stats())[1] == {**file_stats(), "path": "c", "lines": 1}
    with pytest.raises(ValueError, match=r"unknown keys \['tokenz'\]"):
        SubsetStats.from_json({"tokenz": 1})
