"""With --pii, no record the engine makes holds an address the pii stage replaces (the job: test_pii_outputs.py)."""

import json

import pytest
from engine_helpers import FruitStage, chunk, config, doc, spec

from pipeline.core.documents import PREFIX_CHARS, Line
from pipeline.process.clean import Cleaner
from pipeline.process.documents import WorkItem
from pipeline.process.engine import Engine
from pipeline.process.redaction import Redaction
from pipeline.stages import registry
from pipeline.stages.pii import Pii, PiiOptions

EMAIL, OTHER, IP = "jane.roe@mail-host.net", "bob.smith@corp.example.com", "8.8.4.4"
ADDRESSES = (EMAIL, OTHER, IP)


@pytest.fixture(scope="module")
def fruit():
    registry.register(FruitStage)
    yield FruitStage.name
    registry.unregister(FruitStage.name)


STRADDLING = "x" * (PREFIX_CHARS - 20) + " " + OTHER  # crosses the prefix's end


def _lines() -> list:
    return [
        doc(f"write to {EMAIL} from {IP}", "CommonCrawl"),  # subset_unknown: the line as a prefix
        doc("a name as a subset", OTHER),  # subset_unknown: the name in the detail too
        f'{{"text": "one {EMAIL}", "text": "two", "meta": {{"pile_set_name": "ArXiv"}}}}'.encode(),  # duplicate_key
        {"text": f"mail {EMAIL}", "meta": IP},  # meta_not_object
        {"text": 5, "id": EMAIL, "meta": {"pile_set_name": "ArXiv"}},  # text_not_string, its id
        doc(STRADDLING, "CommonCrawl"),
        doc(f"the banana of {EMAIL} at {IP}"),  # removed by the stage: its first words a field of the record
        doc(f"CUT kept, written to {OTHER}", id=OTHER),  # cut: its record carries the id
        doc(f"kept: {EMAIL}"),
    ]


def _leaks(value) -> list[str]:
    text = json.dumps(value)
    return [a for a in ADDRESSES if a in text]


def test_no_record_holds_an_address_the_stage_replaces(fruit, tmp_path, tiny_model):
    cfg = config(tmp_path, tiny_model, filters=(fruit,), stage_options=(PiiOptions(pii=("email", "ip")),),
                 id_key="id")
    engine = Engine(cfg, spec(tiny_model))
    engine.setup()
    result = engine.process(WorkItem(chunk(_lines())))
    reasons = [d["reason"] for d in result.dead_letters]
    assert reasons == ["subset_unknown", "subset_unknown", "duplicate_key", "meta_not_object", "text_not_string",
                       "subset_unknown"]
    assert [r["reason"] for r in result.removed] == ["engine_fruit", "engine_fruit_cut"]
    assert _leaks(result.dead_letters) == [] and _leaks(result.removed) == []
    assert "email@example.com" in result.dead_letters[0]["prefix"] and "22.214.171.124" in result.dead_letters[0][
        "prefix"]
    assert result.dead_letters[4]["id"] == "email@example.com"
    # Redacted whole, then cut: not a part of the address the patterns would no longer match.
    replaced = json.dumps(doc(STRADDLING.replace(OTHER, "email@example.com"), "CommonCrawl"))
    prefix = result.dead_letters[5]["prefix"]
    assert prefix == replaced[:PREFIX_CHARS] and OTHER[:9] not in prefix
    assert result.removed[1]["id"] == "email@example.com" and result.removed[1]["file"] == "/data/in-0.jsonl"
    assert result.stats.subsets["Pile-CC"].tallies["pii"] == {"email": 2}


def test_without_pii_the_records_are_as_the_line_has_them(fruit, tmp_path, tiny_model):
    engine = Engine(config(tmp_path, tiny_model, filters=(fruit,), id_key="id"), spec(tiny_model))
    engine.setup()
    result = engine.process(WorkItem(chunk(_lines())))
    assert set(_leaks(result.dead_letters)) == set(ADDRESSES) and _leaks(result.removed) == [EMAIL, OTHER, IP]
    assert not Redaction.of(engine.documents._policy.stages)  # noqa: SLF001 -- no pii stage, no redaction
    line = Line(1, 0, b'{"text": "' + b"\xff" * 300)
    assert Redaction().prefix(line) == Redaction(("email",)).prefix(line)  # what line_prefix gives


def test_clean_documents_records_are_redacted_too():
    cleaner = Cleaner((FruitStage(), Pii(PiiOptions(pii=("email", "ip")))))
    removed = cleaner.clean({"text": f"banana {EMAIL}", "meta": {"pile_set_name": "X", "from": IP}})
    assert removed.kept is None and _leaks(removed.records) == []
    kept = cleaner.clean({"text": f"CUT to {EMAIL}", "meta": {"pile_set_name": "X"}})
    assert kept.kept["text"] == "to email@example.com" and _leaks(kept.records) == []
    plain = Cleaner((FruitStage(),)).clean({"text": f"banana {EMAIL}", "meta": {"pile_set_name": "X"}})
    assert _leaks(plain.records) == [EMAIL]
