"""SpacyWords gives spaCy's own blank-English tokens and sentence counts, chunk cache or not.

The reference is spaCy itself called as datatrove calls it: `spacy.blank("en")` with the
sentencizer on the whole text, token texts stripped, empty ones dropped; the sentence count is
the number of `doc.sents` (one for a text without tokens, as datatrove's split gives one part).
"""

from __future__ import annotations

import random

import pytest
import spacy
from filter_cases import crafted

from pipeline.stages import words as words_module
from pipeline.stages.words import SpacyWords

PIECES = [": x.A", "b:", "c.D", ":x", "x.", "don't", "can't", "'s", "'em", ":)", ":-)", "<3", ":P", "e.g.", "i.e.",
          "a.m.", "10a.m.", "U.S.", "Jan.", "Mr.", "http://example.com/a?b=c.", "www.example.org,", "x@y.z",
          "(*_*)", "(._.)", "._.", "(-:", "IS_ALPHA", "''", "``", "\u00e9t\u00e9", "na\u00efve", "\u8fd9\u662f",
          "--", "...", "\u2026", "#", "[1]", "{x}", "5.", "3.14", "-", "\u2022", "word", "The", "and", "(", ")",
          "x", "s", "p", "D", "=", "[", "]", "O", "o", "8)", ";)", "'", '"', "!", "?", "."]
SEPARATORS = [" ", " ", " ", "", "  ", "\n", "\t", "\u00a0", " \t ", "\n\n", "\u3000", "\r\n"]


@pytest.fixture(scope="module")
def reference():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")

    def tokens(text: str) -> list[str]:
        return [t.text.strip() for t in nlp(text) if t.text.strip()]

    def sentences(line: str) -> int:
        return max(1, len(list(nlp(line).sents)))

    return tokens, sentences


def fuzz(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.2:  # letters only: one token unless a special case (words.py's fast path)
                parts.append("".join(rng.choice("aAdDlLmMnNoOsStTvVreI") for _ in range(rng.randint(1, 6))))
            else:
                parts.append(rng.choice(PIECES))
            parts.append(rng.choice(SEPARATORS))
        out.append("".join(parts))
    return out


def test_tokens_are_spacys(reference):
    tokens, _ = reference
    words = SpacyWords()
    texts = [text for _, text in crafted() if len(text) < 200_000] + fuzz(1, 3000)
    for text in texts:
        assert words.tokens(text) == tokens(text), repr(text[:200])
        assert words.words(text) == tokens(text)


def test_sentence_counts_are_the_sentencizers(reference):
    _, sentences = reference
    words = SpacyWords()
    lines = [line.strip() for line in fuzz(2, 3000) for line in line.splitlines()]
    lines += [line.strip() for _, text in crafted() if len(text) < 200_000 for line in text.splitlines()]
    for line in lines:
        assert words.sentence_count(line) == sentences(line), repr(line)


def test_chunks_of_letters_only_are_single_tokens_unless_special_cases(reference):
    tokens, _ = reference
    rng = random.Random(4)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    chunks = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 10))) for _ in range(20_000)]
    chunks += ["dont", "Gonna", "cannot", "Im", "ive", "lets", "whats", "y", "ol"]
    words = SpacyWords()
    for chunk in chunks:
        assert words.tokens(chunk) == tokens(chunk), chunk


@pytest.mark.slow
def test_a_full_chunk_table_turns_over_and_answers_stay_the_same(reference, monkeypatch):
    tokens, _ = reference
    monkeypatch.setattr(words_module, "MAX_CHUNKS", 50)
    words = SpacyWords()
    texts = fuzz(3, 100)  # each turnover loads spaCy's pipeline afresh: a hundred or so are plenty
    for text in texts + texts[:30]:  # the second time, some chunks come back from the older generation
        assert words.tokens(text) == tokens(text)
        assert len(words._chunks) <= 50 + len(text.split()) and len(words._older) <= 50 + 80


def test_the_last_text_is_tokenized_once():
    words = SpacyWords()
    text = "One text, tokenized once for every filter that reads its words."
    first = words.words(text)
    assert words.words(text) is first
    assert words.words(text + " ") is not first


def test_the_suffix_window_holds_for_this_spacy():
    # words.py searches spaCy's suffixes from the last SUFFIX_WINDOW characters: every piece of the
    # pattern but `\.\.+` must match at most that many (re's own parser measures them).
    import re._parser as parser  # noqa: PLC0415 -- the measure, in the test only

    from spacy.lang.en import English

    if spacy.__version__ != words_module.SUFFIX_WINDOW_SPACY:
        pytest.skip("the window is used only with the spaCy it was measured on")
    widths = {piece: parser.parse(piece).getwidth()[1] for piece in English.Defaults.suffixes}
    unbounded = [piece for piece, width in widths.items() if width > words_module.SUFFIX_WINDOW]
    assert unbounded == [r"\.\.+"], unbounded


def _first_characters(items) -> set[int]:
    """The code points a parsed pattern can start consuming with (skipping lookarounds before it)."""
    import re._parser as parser  # noqa: PLC0415 -- the measure, in the test only

    for op, arg in items:
        if op is parser.ASSERT or op is parser.ASSERT_NOT:
            continue
        if op is parser.LITERAL:
            return {arg}
        if op is parser.IN:
            out = set()
            for kind, value in arg:
                if kind is parser.LITERAL:
                    out.add(value)
                elif kind is parser.RANGE:
                    out.update(range(value[0], value[1] + 1))
                else:
                    raise AssertionError(f"unexpected {kind} in a class: measure it")
            return out
        if op is parser.BRANCH:
            return set().union(*(_first_characters(branch) for branch in arg[1]))
        if op in (parser.MAX_REPEAT, parser.MIN_REPEAT) and arg[0] >= 1:
            return _first_characters(arg[2])
        if op is parser.SUBPATTERN:
            return _first_characters(arg[3])
        raise AssertionError(f"unexpected {op}: measure it")
    raise AssertionError("a pattern that consumes nothing")


def test_the_ascii_infix_characters_hold_for_this_spacy():
    import re._parser as parser  # noqa: PLC0415 -- the measure, in the test only

    from spacy.lang.en import English

    if spacy.__version__ != words_module.SUFFIX_WINDOW_SPACY:
        pytest.skip("used only with the spaCy it was measured on")
    first = set().union(*(_first_characters(parser.parse(p).data) for p in English.Defaults.infixes))
    assert {chr(c) for c in first if c < 128} == set(words_module.INFIX_ASCII)
