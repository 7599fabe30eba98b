"""--split_by in the engine: each kept document routed to its bucket once, after the policy; each bucket's
records those of its documents alone; the buckets' counts add up to the work item's; the bucket names.
"""

import json
import random

import pytest
from engine_helpers import chunk, config, doc, spec
from sample_corpus import compose_lines
from split_helpers import ShelfOptions, ShelfStage, shelf

from pipeline.format import buckets
from pipeline.process.documents import WorkItem
from pipeline.process.engine import Engine
from pipeline.process.result import ChunkResult
from pipeline.stages import registry


@pytest.fixture(scope="module")
def shelves():
    registry.register(ShelfStage)
    yield ShelfStage.name
    registry.unregister(ShelfStage.name)


def _corpus(n: int = 80, seed: int = 7) -> list:
    lines = [json.loads(raw) for raw in compose_lines(random.Random(seed), n)]
    lines[3] = b"not json"
    lines[5] = doc("a loose page without a shelf")
    lines[6] = doc("CUT " + "seven words on the first shelf here")
    lines[11] = doc("")
    return lines


def _kept(lines: list) -> list[dict]:
    return [o for o in lines if isinstance(o, dict) and o["text"].strip()]


def _item(lines: list) -> WorkItem:
    return WorkItem(chunk(lines, 1, 0))


@pytest.mark.parametrize("packing_mode", ["concat", "best_fit"])
def test_each_bucket_holds_the_records_of_its_documents_alone(shelves, tmp_path, tiny_model, packing_mode):
    lines = _corpus()
    split = Engine(config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf", packing=packing_mode),
                   spec(tiny_model))
    split.setup()
    result = split.process(_item(lines))
    values = {shelf(o["text"]) for o in _kept(lines)}
    assert {b.bucket for b in result.blocks} | {t.bucket for t in result.tails} == {
        buckets.NONE if v is None else v for v in values}
    for value in ("0", "1", "2"):
        alone = Engine(config(tmp_path, tiny_model, filters=(shelves,), packing=packing_mode,
                              stage_options=(ShelfOptions(shelf_only=value),)), spec(tiny_model))
        alone.setup()
        own = alone.process(_item(lines))
        mine = [b for b in result.blocks if b.bucket == value]
        assert [(b.source, bytes(b.records.data)) for b in mine] == [
            (b.source, bytes(b.records.data)) for b in own.blocks], value
        tails = [t for t in result.tails if t.bucket == value]
        assert [t.piece.labels.tolist() for t in tails] == [t.piece.labels.tolist() for t in own.tails]
        assert own.stats.subsets.keys() >= result.buckets[value].subsets.keys()
        for name, s in result.buckets[value].subsets.items():
            theirs = own.stats.subsets[name]
            assert (s.kept, s.tokens, s.text_bytes, s.labels) == (theirs.kept, theirs.tokens, theirs.text_bytes,
                                                                  theirs.labels), (value, name)
            assert s.documents == s.kept and s.filtered == {} and s.removed is None


def test_the_buckets_counts_add_up_to_the_work_item_s(shelves, tmp_path, tiny_model):
    lines = _corpus()
    engine = Engine(config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf",
                           epochs=(("Pile-CC", 2.5),)), spec(tiny_model))
    engine.setup()
    result = engine.process(_item(lines))
    assert buckets.NONE in result.buckets  # the loose page: no label, never lost
    for name, s in result.stats.subsets.items():
        parts = [b.subsets[name] for b in result.buckets.values() if name in b.subsets]
        for field in ("kept", "tokens", "tokens_with_epochs", "text_bytes", "cut"):
            assert sum(getattr(p, field) or 0 for p in parts) == (getattr(s, field) or 0), (name, field)
        assert sum(p.tallies.get(shelves, {}).get("cuts", 0) for p in parts) == s.tallies.get(shelves, {}).get(
            "cuts", 0)
    plain = Engine(config(tmp_path, tiny_model, filters=(shelves,), epochs=(("Pile-CC", 2.5),)), spec(tiny_model))
    plain.setup()
    alone = plain.process(_item(lines))
    assert alone.stats == result.stats and not alone.buckets  # the run's counts: as without --split_by
    labels = sum(len(t.piece.labels) for t in result.tails) + sum(len(b.records) for b in result.blocks) * 32
    assert labels == result.tokens_with_epochs  # every label in one bucket's records or tail


def test_a_result_with_buckets_reads_back_from_its_bytes(shelves, tmp_path, tiny_model):
    engine = Engine(config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf", provenance=True),
                    spec(tiny_model))
    engine.setup()
    result = engine.process(_item(_corpus(40)))
    data = result.to_bytes()
    back = ChunkResult.from_bytes(data)
    assert back.to_bytes() == data and back.buckets == result.buckets
    assert [b.bucket for b in back.blocks] == [b.bucket for b in result.blocks]
    assert [t.bucket for t in back.tails] == [t.bucket for t in result.tails]
    plain = Engine(config(tmp_path, tiny_model, filters=(shelves,)), spec(tiny_model))
    plain.setup()
    assert b'"bucket' not in plain.process(_item(_corpus(40))).to_bytes()  # no key without --split_by


def test_bucket_names_are_safe_ordered_and_distinct():
    assert buckets.directory("hf.int_score", "3") == "hf.int_score=3"
    for value, name in {"..": "_.", ".": "_", "a/b c": "a_b_c", "": "_", "../../etc": "_._.._etc"}.items():
        assert buckets.slug(value) == name
        assert buckets.is_bucket_dir(buckets.directory("k", value))
    assert len(buckets.slug("x" * 500)) == buckets.MAX_NAME
    assert buckets.ordered(["10", "9", "none", "0.5"]) == ["0.5", "9", "10", "none"]
    assert buckets.ordered(["en", "de", "none", "10"]) == ["10", "de", "en", "none"]
    with pytest.raises(buckets.BucketError, match="--split_by k: the values 'a b' and 'a_b' would share"):
        buckets.directories("k", ["a b", "a_b"])
    with pytest.raises(buckets.BucketError, match="case aside"):
        buckets.directories("k", ["HQ", "hq"])
    assert buckets.bucket_of({"k": 3}, "k") == "3" and buckets.bucket_of(None, "k") == buckets.NONE


def test_split_by_is_refused_where_it_cannot_be(shelves, tmp_path, tiny_model):
    with pytest.raises(ValueError, match="--split_by shelf: no stage is on"):
        config(tmp_path, tiny_model, split_by="shelf")
    with pytest.raises(ValueError, match="--split_by with --per_subset"):
        config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf", per_subset=True, subsets=("ArXiv",))
    with pytest.raises(ValueError, match="--split_by is for TFRecord outputs"):
        config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf", output_format="megatron")
    with pytest.raises(ValueError, match=r"--split_by color: no stage on labels documents so \(the labels of the "
                       r"stages on: shelf, tag\)"):
        config(tmp_path, tiny_model, filters=(shelves,), split_by="color").check_stages_ready()
    declared = config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf")
    assert declared.split_values() == ("0", "1", "2", buckets.NONE)
    found = config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf",
                   stage_options=(ShelfOptions(shelf_declared=False),))
    assert found.split_values() is None
    assert declared.to_json()["split_by"] == "shelf" and "split_by" not in config(tmp_path, tiny_model).to_json()


def test_the_classifier_stages_declare_their_labels(tmp_path):
    from pipeline.stages import classifier_training as recipe
    from pipeline.stages.fasttext_classifier import FastTextClassifier, FastTextClassifierOptions
    from pipeline.stages.language import Language, LanguageOptions

    model = str(tmp_path / "ft.bin")
    recipe.train([f"good text {i}" for i in range(40)], [f"bad spam {i}" for i in range(40)], model,
                 recipe.FastTextSettings(dim=4, epoch=2, lr=0.5), 0.1)
    stage = FastTextClassifier(FastTextClassifierOptions(fasttext_model=model, fasttext_score_bins=10))
    declared = stage.labels()
    assert set(declared) == {"fasttext.hq", "fasttext.cc"}
    assert all(values == tuple(f"0.{i}0" for i in range(10)) for values in declared.values())
    assert Language(LanguageOptions(languages=("en", "de"))).labels() == {"language": ("en", "de")}


def test_the_stages_decide_each_document_once_whatever_the_buckets(shelves, tmp_path, tiny_model, monkeypatch):
    seen = []
    decide = ShelfStage.apply_many
    monkeypatch.setattr(ShelfStage, "apply_many", lambda self, docs: seen.extend(d.line for d in docs) or decide(
        self, docs))
    lines = _corpus()
    engine = Engine(config(tmp_path, tiny_model, filters=(shelves,), split_by="shelf"), spec(tiny_model))
    engine.setup()
    result = engine.process(_item(lines))
    assert sorted(seen) == [i + 1 for i, o in enumerate(lines) if isinstance(o, dict) and o["text"].strip()]
    assert len(result.buckets) == 4  # one decision each, four buckets
