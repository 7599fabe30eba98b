"""The job's typed stats: merged by a method, their manifest form (what shows when), read back."""

import pytest
from engine_helpers import FruitStage, chunk, config, doc, spec

from pipeline.beam.manifest import removed_entry
from pipeline.core.documents import file_stats
from pipeline.core.stats import JobStats, PackingStats, SubsetStats, merge_stats
from pipeline.format.summary import rule_lines, tally_lines
from pipeline.process.documents import WorkItem
from pipeline.process.engine import Engine
from pipeline.stages import registry
from pipeline.tokenize.kinds.detect import load_tokenizer


def test_a_subset_s_manifest_form_shows_a_field_once_it_is_set_or_counted():
    s = SubsetStats()
    assert s.to_json() == {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0}
    s.add_written(0, 1, None)  # a document of no tokens written: `tokens` shows, at 0
    assert s.to_json()["tokens"] == 0 and s.to_json()["tokens_with_epochs"] == 0
    listing = JobStats().subset("ArXiv", lists_removed=True)
    assert listing.to_json() == {"documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0, "removed": {},
                                 "removed_tokens": {}}
    listing.add_removed("dedup", "duplicate_exact")
    listing.add_removed_tokens("dedup", "duplicate_exact", 7)
    listing.add_cut([("c_cut", "r1"), ("c_cut", "r1")])
    assert listing.to_json() == {
        "documents": 0, "kept": 0, "filtered": {}, "text_bytes": 0, "removed": {"dedup": 1},
        "removed_tokens": {"dedup": 7}, "rules": {"dedup": {"duplicate_exact": {"documents": 1, "tokens": 7}}},
        "cut": 1, "cut_by_reason": {"c_cut": 2}, "cut_rules": {"c_cut": {"r1": {"documents": 2}}}}


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


@pytest.fixture
def fruit():
    registry.register(FruitStage)
    yield FruitStage.name
    registry.unregister(FruitStage.name)


def test_each_removal_and_cut_is_counted_by_rule_with_its_tokens(fruit, tmp_path, tiny_model):
    engine = Engine(config(tmp_path, tiny_model, filters=(fruit,), add_bos=True), spec(tiny_model, add_bos=True))
    engine.setup()
    texts = ["a banana here", "two banana there", "CUT the rest", "plain"]
    result = engine.process(WorkItem(chunk([doc(t) for t in texts])))
    s = result.stats.subsets["Pile-CC"]
    tokens = sum(len(load_tokenizer(tiny_model).encode_one(t)) + 2 for t in texts[:2])
    assert s.rules == {"engine_fruit": {"banana": {"documents": 2, "tokens": tokens}}}
    assert s.removed_tokens == {"engine_fruit": tokens} and s.removed == {"engine_fruit": 2}
    assert s.cut_rules == {"engine_fruit_cut": {"cut_prefix": {"documents": 1}}}
    assert s.tallies == {"engine_fruit": {"cuts": 1}}
    # Dedup's records have no rule of their own: their reason is their rule.
    dedup = Engine(config(tmp_path, tiny_model, dedup="exact"), spec(tiny_model))
    dedup.setup()
    record = {"file_index": 0, "line": 2, "subset": "Pile-CC", "reason": "duplicate_exact", "similarity": 1.0}
    s = dedup.process(WorkItem(chunk([doc("a"), doc("a")]), removed={2: record})).stats.subsets["Pile-CC"]
    assert s.rules == {"duplicate_exact": {"duplicate_exact": {"documents": 1, "tokens": 2}}}


def test_the_manifest_s_removed_block_and_the_summary_show_the_rules():
    subsets = {
        "Pile-CC": {"removed": {"q": 3}, "removed_tokens": {"q": 30}, "tallies": {"pii": {"email": 2, "ip": 1}},
                    "rules": {"q": {"short": {"documents": 2, "tokens": 10}, "long": {"documents": 1, "tokens": 20}}},
                    "cut": 1, "cut_by_reason": {"q_cut": 1}, "cut_rules": {"q_cut": {"lines": {"documents": 1}}}},
        "ArXiv": {"removed": {"q": 1}, "removed_tokens": {"q": 4}, "tallies": {"pii": {"email": 5}},
                  "rules": {"q": {"short": {"documents": 1, "tokens": 4}}}},
    }
    entry = removed_entry(subsets, {})
    assert entry["rules"] == {"q": {"long": {"documents": 1, "tokens": 20}, "short": {"documents": 3, "tokens": 14}}}
    assert entry["cut_rules"] == {"q_cut": {"lines": {"documents": 1}}} and entry["by_reason"] == {"q": 4}
    assert "rules" not in removed_entry({"A": {"removed": {}, "removed_tokens": {}}}, {})
    manifest = {"subsets": subsets}
    table = rule_lines(manifest)[0].splitlines()
    assert table[2].split() == ["q", "/", "long", "1", "20", "Pile-CC", "1"]
    assert table[3].split() == ["q", "/", "short", "3", "14", "Pile-CC", "2,", "ArXiv", "1"]
    assert table[4].split() == ["q_cut", "/", "lines", "1", "-", "Pile-CC", "1"]
    assert tally_lines(manifest) == ["pii: email 7, ip 1"]
    assert rule_lines({"subsets": {"A": {}}}) == [] and tally_lines({"subsets": {"A": {}}}) == []
