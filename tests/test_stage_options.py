"""Every stage option has its range: a value outside its meaning is refused, naming the flag, before the job.

A negative threshold, a share above 1, a C4 count below the -1 that turns its rule off, an n-gram
size past MAX_N, a minimum above its maximum: each would make a stage remove every document (the
job then ends with "wrote no records") or cost without bound. `run.parse_args` raises the one-line
UsageError the command exits 2 with; the same checks hold for options made in code.
"""

from __future__ import annotations

import dataclasses
import doctest

import pytest

from pipeline.cli import run
from pipeline.core.options import UsageError, options_of
from pipeline.stages import ranges, registry
from pipeline.stages.gopher_repetition import MAX_N, GopherRepetitionOptions
from pipeline.stages.pii import PiiOptions, parse_kinds

ARGS = ["--input", "x.jsonl", "--output_dir", "out", "--tokenizer_model", "m.model"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--filters", "gopher_quality", "--gopher_max_symbol_word_ratio", "-0.5"],
     "--gopher_max_symbol_word_ratio -0.5 is below 0"),
    (["--filters", "gopher_quality", "--gopher_max_bullet_lines_ratio", "1.5"],
     "--gopher_max_bullet_lines_ratio 1.5 is above 1"),
    (["--filters", "gopher_quality", "--gopher_min_doc_words", "-3"], "--gopher_min_doc_words -3 is below 0"),
    (["--filters", "gopher_quality", "--gopher_min_doc_words", "60", "--gopher_max_doc_words", "50"],
     "--gopher_min_doc_words 60 is above --gopher_max_doc_words 50"),
    (["--filters", "gopher_quality", "--gopher_min_avg_word_length", "12"],
     "--gopher_min_avg_word_length 12 is above --gopher_max_avg_word_length 10"),
    (["--filters", "gopher_quality", "--gopher_min_stop_words", "9"], "--gopher_min_stop_words 9 is above the 8"),
    (["--filters", "gopher_quality", "--gopher_min_stop_words", "2", "--gopher_stop_words", "the,the"],
     "--gopher_min_stop_words 2 is above the 1"),
    (["--filters", "gopher_repetition", "--gopher_dup_line_frac", "1.01"], "--gopher_dup_line_frac 1.01 is above 1"),
    (["--filters", "gopher_repetition", "--gopher_top_n_grams", "16000:0.2"], "--gopher_top_n_grams: an n-gram size "
     f"is 1 to {MAX_N}"),
    (["--filters", "gopher_repetition", "--gopher_dup_n_grams", "5:0.1,5:0.2"], "--gopher_dup_n_grams: n = 5 given"),
    (["--filters", "c4_quality", "--c4_max_word_length", "-7"], "--c4_max_word_length -7 is below 1"),
    (["--filters", "c4_quality", "--c4_max_word_length", "0"], "--c4_max_word_length 0 is below 1"),
    (["--filters", "c4_quality", "--c4_min_num_sentences", "-2"], "--c4_min_num_sentences -2 is below 0"),
    (["--filters", "c4_quality", "--c4_min_words_per_line", "-5"], "--c4_min_words_per_line -5 is below 0"),
    (["--filters", "fineweb_quality", "--fineweb_short_line_thr", "5"], "--fineweb_short_line_thr 5 is above 1"),
    (["--filters", "fineweb_quality", "--fineweb_line_punct_thr", "-0.1"], "--fineweb_line_punct_thr -0.1 is below 0"),
    (["--filters", "fineweb_quality", "--fineweb_char_duplicates_ratio", "nan"], "--fineweb_char_duplicates_ratio nan"),
    (["--filters", "fineweb_quality", "--fineweb_short_line_length", "-1"], "--fineweb_short_line_length -1 is below"),
    (["--filters", "fineweb_quality", "--fineweb_new_line_ratio", "-2"], "--fineweb_new_line_ratio -2 is below 0"),
    (["--languages", "en", "--language_min_score", "2"], "--language_min_score"),
    (["--pii", "email,email"], "--pii email,email: a kind named twice"),
    (["--pii", "ip, IP"], "--pii ip,ip: a kind named twice"),
])
def test_values_outside_their_meaning_are_refused_naming_the_flag(flags, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(".", r"\.").replace("+", r"\+")):
        run.parse_args([*ARGS, *flags])


@pytest.mark.parametrize("flags", [
    ["--filters", "c4_quality", "--c4_max_word_length", "-1", "--c4_min_num_sentences", "-1",
     "--c4_min_words_per_line", "-1"],
    ["--filters", "gopher_quality", "--gopher_max_symbol_word_ratio", "2.5", "--gopher_min_doc_words", "0",
     "--gopher_max_doc_words", "0", "--gopher_min_stop_words", "0"],
    ["--filters", "gopher_repetition", "--gopher_top_n_grams", f"{MAX_N}:0.5", "--gopher_dup_line_frac", "1"],
    ["--filters", "fineweb_quality", "--fineweb_short_line_thr", "1", "--fineweb_new_line_ratio", "3"],
])
def test_values_at_the_ends_of_their_ranges_and_off_are_taken(flags):
    config, _ = run.parse_args([*ARGS, *flags])
    assert config.stage_names()


def _numbers(cls) -> list[str]:
    return [f.name for f, _ in options_of(cls) if f.type in ("int", "float", int, float)]


@pytest.mark.parametrize("name", registry.choices())
def test_every_numeric_option_of_every_stage_has_a_range(name):
    cls = registry.STAGES[name].Options
    if cls is None:
        return
    for field in _numbers(cls):
        for wrong in (-1e9, float("inf")):
            with pytest.raises(ValueError, match=f"--{field}"):
                cls(**{field: wrong})
    cls()  # the defaults are in range


def test_the_same_checks_hold_in_code():
    with pytest.raises(ValueError, match="--gopher_top_n_grams: an n-gram size"):
        GopherRepetitionOptions(gopher_top_n_grams=((40, 0.2),))
    with pytest.raises(ValueError, match="a kind named twice"):
        PiiOptions(pii=("email", "email"))
    with pytest.raises(ValueError, match="--pii takes"):
        PiiOptions(pii=("phone",))
    assert PiiOptions(pii=("ip", "email")).pii == ("ip", "email")
    assert dataclasses.replace(GopherRepetitionOptions(), gopher_dup_n_grams=()).gopher_dup_n_grams == ()


def test_a_kind_named_twice_is_refused():
    for value in ("email,email", "ip, IP", ["ip", "ip"], ["email", "EMAIL,ip"]):
        with pytest.raises(ValueError, match="named twice"):
            parse_kinds(value)
    assert parse_kinds(["ip", "email"]) == ("email", "ip")


def test_the_range_doctest():
    assert doctest.testmod(ranges).failed == 0
