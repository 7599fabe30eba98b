"""The quality filters and PII redaction decide as datatrove 0.10.1 does: datatrove run for real, side by side.

The corpus: real text of six kinds from this machine (scripts/bench/real_text_corpus.py --shape
kinds: prose, code, manual pages, changelog lists, short-line catalog messages, non-English; over
2,000 documents) plus texts on every rule's threshold and on spaCy's traps
(scripts/datagen/filter_cases.py). datatrove runs in .venv-datatrove
(scripts/setup_datatrove_env.sh) through scripts/bench/datatrove_filters.py, once per session;
ours in this interpreter. For each filter alone the removed documents and their rules must be the
same, C4's kept text must be datatrove's modified text character for character, the four in a
chain must stop at the same filter with the same rule, and PII redaction must give datatrove's text.
In CI (CI=true) a missing datatrove environment is a failure, elsewhere a skip.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
from filter_cases import crafted

from pipeline.stages import punctuation
from pipeline.stages.base import Keep, Remove
from pipeline.stages.c4_quality import C4QualityOptions, c4_quality
from pipeline.stages.fineweb_quality import FineWebQualityOptions, fineweb_quality_removal
from pipeline.stages.gopher_quality import GopherQualityOptions, gopher_quality_removal
from pipeline.stages.gopher_repetition import GopherRepetitionOptions, gopher_repetition_removal
from pipeline.stages.pii import redact
from pipeline.stages.words import SpacyWords

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("DATATROVE_VENV", REPO / ".venv-datatrove"))
PYTHON = VENV / "bin" / "python"
FILTERS = ("gopher_quality", "gopher_repetition", "c4_quality", "fineweb_quality")
CORPUS_BYTES = 5_500_000  # ~2,100 documents of the kinds shape

pytestmark = pytest.mark.slow


def _real_text_corpus():
    spec = importlib.util.spec_from_file_location("real_text_corpus", REPO / "scripts/bench/real_text_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def documents() -> list[tuple[str, str]]:
    """(kind, text): the kinds corpus, then the crafted cases."""
    lines = _real_text_corpus().compose(CORPUS_BYTES, seed=0, shape="kinds")
    docs = [(json.loads(line)["meta"]["pile_set_name"], json.loads(line)["text"]) for line in lines]
    return docs + [(f"crafted: {label}", text) for label, text in crafted()]


@pytest.fixture(scope="session")
def datatrove(documents, tmp_path_factory) -> dict:
    """datatrove's decisions on the documents (scripts/bench/datatrove_filters.py in .venv-datatrove)."""
    if not PYTHON.exists():
        reason = f"datatrove environment not found at {VENV}: build it with `bash scripts/setup_datatrove_env.sh`"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("datatrove")
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": text}) + "\n" for _, text in documents))
    subprocess.run([str(PYTHON), str(REPO / "scripts/bench/datatrove_filters.py"), str(docs), str(root / "out.json")],
                   check=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return json.loads((root / "out.json").read_text())


@pytest.fixture(scope="session")
def words() -> SpacyWords:
    return SpacyWords()


def verdict(name: str, text: str, words: SpacyWords) -> Remove | Keep | None:
    """Our filter's verdict on a text."""
    if name == "gopher_quality":
        return gopher_quality_removal(text, words.words(text), GopherQualityOptions())
    if name == "gopher_repetition":
        return gopher_repetition_removal(text, words.words(text), GopherRepetitionOptions())
    if name == "c4_quality":
        return c4_quality(text, C4QualityOptions(), words.sentence_count)
    return fineweb_quality_removal(text, words.words, FineWebQualityOptions())


def ours(name: str, text: str, words: SpacyWords) -> tuple[str | None, str | None]:
    """(rule or None, the new text when c4_quality changed it): as datatrove_filters.decide reports."""
    found = verdict(name, text, words)
    if isinstance(found, Remove):
        return found.rule, None
    return None, (found.text if isinstance(found, Keep) else None)


def test_corpus_is_large_and_varied(documents):
    kinds = collections.Counter(kind for kind, _ in documents if not kind.startswith("crafted"))
    assert sum(kinds.values()) >= 2000, kinds
    assert set(kinds) == {"prose", "code", "manpages", "lists", "subtitles", "non-English"}, kinds
    assert min(kinds.values()) >= 150, kinds


def test_punctuation_sets_are_datatroves(datatrove):
    assert punctuation.PUNCTUATION == datatrove["punctuation"]
    assert punctuation.TERMINAL_SET == set(datatrove["terminal"])


def test_our_words_follow_the_spacy_datatrove_runs(datatrove):
    # tests/test_stage_words.py checks our tokens against this environment's spaCy: it must be datatrove's
    import spacy

    assert spacy.__version__ == datatrove["spacy"]


@pytest.mark.parametrize("name", FILTERS)
def test_each_filter_removes_what_datatrove_removes(name, documents, datatrove, words):
    theirs = datatrove["filters"][name]
    mine = [list(ours(name, text, words)) for _, text in documents]
    differ = [(i, documents[i][0], theirs[i][0], mine[i][0]) for i in range(len(documents)) if theirs[i] != mine[i]]
    assert not differ, f"{len(differ)} documents differ (index, kind, datatrove, ours): {differ[:10]}"
    rules = collections.Counter(rule for rule, _ in theirs if rule)
    # the corpus exercises the filter both ways, with more than one rule
    assert sum(rules.values()) >= 20 and len(documents) - sum(rules.values()) >= 20, rules
    assert len(rules) >= 2, rules


def test_c4_keeps_datatroves_modified_text(documents, datatrove, words):
    changed = [(i, new) for i, (rule, new) in enumerate(datatrove["filters"]["c4_quality"]) if new is not None]
    assert len(changed) >= 100
    for i, new in changed:
        kept = c4_quality(documents[i][1], C4QualityOptions(), words.sentence_count)
        assert isinstance(kept, Keep) and kept.text == new, documents[i][0]
        assert kept.fields["lines"] >= kept.fields["lines_removed"] >= 0


def test_the_chain_stops_where_datatroves_does(documents, datatrove, words):
    mine = []
    for _, text in documents:
        verdict = None
        for name in FILTERS:
            rule, new = ours(name, text, words)
            if rule is not None:
                verdict = [name, rule]
                break
            text = new if new is not None else text
        mine.append(verdict)
    differ = [i for i, (a, b) in enumerate(zip(datatrove["chain"], mine, strict=True)) if a != b]
    assert not differ, [(i, documents[i][0], datatrove["chain"][i], mine[i]) for i in differ[:10]]
    assert collections.Counter(v[0] for v in mine if v).keys() == set(FILTERS)


def test_pii_is_datatroves_text(documents, datatrove):
    mine = [redact(text, ("email", "ip"))[0] for _, text in documents]
    differ = [i for i, (a, b) in enumerate(zip(datatrove["pii"], mine, strict=True)) if a != b]
    assert not differ, [documents[i][0] for i in differ[:10]]
    assert sum(a != text for a, (_, text) in zip(mine, documents, strict=True)) >= 20


# rule -> how its value fails its threshold (the "min" rules remove below it, the others above)
BELOW = {"gopher_short_doc", "gopher_below_avg_threshold", "gopher_below_alpha_threshold", "gopher_enough_stop_words",
         "too_few_sentences", "line_punct_ratio"}
NO_VALUE = {"empty", "lorem_ipsum", "curly_bracket"}


@pytest.mark.parametrize("name", FILTERS)
def test_each_removal_carries_its_value_and_threshold(name, documents, words):
    seen = collections.Counter()
    for _, text in documents:
        found = verdict(name, text, words)
        if not isinstance(found, Remove):
            continue
        seen[found.rule] += 1
        if found.rule in NO_VALUE:
            assert found.fields == {}, found
            continue
        value, threshold = found.fields["value"], found.fields["threshold"]
        assert set(found.fields) == {"value", "threshold"} and round(value, 6) == value, found
        assert (value < threshold if found.rule in BELOW else value > threshold) or round(value, 6) == threshold, found
    assert len(seen) >= 3, seen
