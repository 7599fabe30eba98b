"""Each removal and cut record carries the deciding value of its rule: `value` and `threshold`, rounded.

The texts sit on known values (filter_cases.py's words: letters only, one spaCy token each), so the
values are exact; through the policy, as every job runs the stages, the record holds them beside
its own keys. tests/test_quality_filters.py checks on the whole corpus that every value fails its
threshold the way the rule says.
"""

from __future__ import annotations

import json

import pytest
from filter_cases import sentence_lines, words

from pipeline.core.documents import Schema
from pipeline.io.inputs import Chunk, Line
from pipeline.stages.base import DIGITS, Doc, Keep, Remove, measured
from pipeline.stages.c4_quality import C4Quality
from pipeline.stages.fineweb_quality import FineWebQuality
from pipeline.stages.gopher_quality import GopherQuality, GopherQualityOptions
from pipeline.stages.gopher_repetition import GopherRepetition, repeated_n_gram_chars
from pipeline.stages.policy import DocumentPolicy

LONG_LINE = "This is a line of the text that is long enough not to count as short"


def _verdict(stage, text: str):
    return stage.apply(Doc(text, "Pile-CC", 0, 1))


@pytest.mark.parametrize(("stage", "text", "rule", "fields"), [
    (GopherQuality(), "the and " + words(46), "gopher_short_doc", {"value": 48, "threshold": 50}),
    (GopherQuality(), "the and " + " ".join(["ab"] * 30 + ["abc"] * 30), "gopher_below_avg_threshold",
     {"value": round(156 / 62, DIGITS), "threshold": 3}),
    (GopherQuality(GopherQualityOptions(gopher_min_stop_words=3)), "the and " + words(60),
     "gopher_enough_stop_words", {"value": 2, "threshold": 3}),
    (GopherRepetition(), "\n".join([f"Line {i} holds the {words(10, start=2 * i)} of it." for i in range(6)]
                                   + ["Line 1 holds the same."] * 5),  # 4 repeats of 11 lines
     "dup_line_frac", {"value": round(4 / 11, DIGITS), "threshold": 0.3}),
    (FineWebQuality(), "\n".join([LONG_LINE + "."] + [f"{LONG_LINE} {i}" for i in range(24)]), "line_punct_ratio",
     {"value": 0.04, "threshold": 0.12}),
    (C4Quality(), sentence_lines(4), "too_few_sentences", {"value": 4, "threshold": 5}),
])
def test_a_removal_carries_its_value_and_threshold(stage, text, rule, fields):
    verdict = _verdict(stage, text)
    assert isinstance(verdict, Remove) and verdict.rule == rule and dict(verdict.fields) == fields


def test_a_c4_cut_counts_its_lines():
    verdict = _verdict(C4Quality(), sentence_lines(5) + "\nToo short.\nAlso.")
    assert isinstance(verdict, Keep) and verdict.cut_rule == "c4_lines_removed"
    assert dict(verdict.fields) == {"lines_removed": 2, "lines": 7}


def test_a_repeated_n_gram_removal_carries_the_whole_scan():
    # the decision stops scanning past the threshold; the record's value is the whole text's
    text = "the and " + " ".join(["alpha beta gamma delta eps"] * 30)
    verdict = _verdict(GopherRepetition(), text)
    assert verdict.rule.startswith("duplicated_") or verdict.rule.startswith("top_")
    found = _verdict(GopherRepetition(GopherRepetition.Options(gopher_top_n_grams=(), gopher_dup_line_frac=0,
                                                               gopher_dup_line_char_frac=0)), text)
    assert found.rule == "duplicated_5_n_grams"
    tokens = text.split()
    offsets = [0]
    for token in tokens:
        offsets.append(offsets[-1] + len(token))
    whole = repeated_n_gram_chars("".join(tokens), offsets, 5) / len(text)
    assert found.fields == measured(whole, 0.15) and whole > 0.5


def test_values_are_rounded_and_the_threshold_kept():
    assert measured(1 / 3, 0.3) == {"value": 0.333333, "threshold": 0.3}
    assert measured(7, 5) == {"value": 7} | {"threshold": 5}
    assert measured(0.5) == {"value": 0.5}


def test_the_record_through_the_policy_holds_the_value_beside_its_own_keys():
    policy = DocumentPolicy(Schema(), 1 << 20, {"Pile-CC"}, (GopherQuality(),))
    policy.setup()
    line = json.dumps({"text": "the and " + words(46), "meta": {"pile_set_name": "Pile-CC"}}).encode()
    (outcome,) = policy.decide(Chunk(0, 0, "in.jsonl", (Line(1, 0, line),)))
    (record,) = outcome.records
    assert outcome.reason == "gopher_quality" and record["rule"] == "gopher_short_doc"
    assert (record["value"], record["threshold"]) == (48, 50)
    assert json.dumps(record, sort_keys=True) == json.dumps(dict(record), sort_keys=True)  # plain JSON values
