"""SpacyWords gives spaCy's own blank-English tokens and sentence counts, chunk cache or not.

The reference is spaCy itself called as datatrove calls it: `spacy.blank("en")` with the
sentencizer on the whole text, token texts stripped, empty ones dropped; the sentence count is
the number of `doc.sents` (one for a text without tokens, as datatrove's split gives one part).
ChunkTokens (spaCy's affix and infix steps in Python) is compared with spaCy's tokenizer chunk by
chunk on adversarial chunks, and the facts spacy_patterns reads from the patterns with re's parse.
"""

from __future__ import annotations

import functools
import random

import pytest
import spacy
from adversarial_shapes import SHAPES, shape_text
from filter_cases import crafted
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.stages.words import SpacyWords
from pipeline.stages.words import spacy_words as words_module
from pipeline.stages.words.chunk_tokens import ChunkTokens
from pipeline.stages.words.spacy_patterns import NONE, AffixFacts, linear_url_match

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


def _reversed(items) -> list:
    """A parsed pattern's items last first, groups and branches reversed too (their last atoms come first)."""
    import re._parser as parser  # noqa: PLC0415 -- the measure, in the test only

    out = []
    for op, arg in reversed(list(items)):
        if op is parser.BRANCH:
            arg = (arg[0], [_reversed(branch) for branch in arg[1]])
        elif op in (parser.MAX_REPEAT, parser.MIN_REPEAT):
            arg = (arg[0], arg[1], _reversed(arg[2]))
        elif op is parser.SUBPATTERN:
            arg = (*arg[:3], _reversed(arg[3]))
        out.append((op, arg))
    return out


def _skip_anchors(items) -> list:
    import re._parser as parser  # noqa: PLC0415 -- the measure, in the test only

    return [(op, arg) for op, arg in items if op is not parser.AT]


@pytest.fixture(scope="module")
def patterns():
    tok = spacy.blank("en").tokenizer
    return tok, [f.__self__.pattern for f in (tok.prefix_search, tok.suffix_search, tok.infix_finditer)]


def test_the_pattern_facts_are_what_re_parses(patterns):
    # spacy_patterns reads spaCy's patterns itself; re's own parser must agree on which characters
    # start a prefix or an infix and end a suffix, and on the suffix window.
    import re._parser as parser  # noqa: PLC0415 -- the measure, in the test only

    from spacy.lang.en import English

    tok, (prefix, suffix, infix) = patterns
    facts = AffixFacts(prefix, suffix, infix)
    first_prefix = set().union(*(_first_characters(_skip_anchors(parser.parse(p).data))
                                 for p in English.Defaults.prefixes if p.strip()))
    last_suffix = set().union(*(_first_characters(_skip_anchors(_reversed(parser.parse(p).data)))
                                for p in English.Defaults.suffixes if p.strip()))
    first_infix = set().union(*(_first_characters(parser.parse(p).data) for p in English.Defaults.infixes))
    sample = set(range(0x3000)) | first_prefix | last_suffix | first_infix
    for code in sorted(sample):
        char = chr(code)
        assert (facts.prefix_kind(char) != NONE) == (code in first_prefix), char
        assert (facts.suffix_kind(char) != NONE) == (code in last_suffix), char
        assert facts.has_infix_start(char) == (code in first_infix), char
    for pieces, runs, window, first in ((English.Defaults.suffixes, facts.suffix_runs, facts.suffix_window, False),
                                        (English.Defaults.prefixes, facts.prefix_runs, facts.prefix_window, True)):
        pieces = [p for p in pieces if p.strip()]  # spaCy skips empty pieces
        widths = [parser.parse(p).getwidth()[1] for p in pieces]
        # a window covers every piece of bounded width (and more: its lookarounds' reach)
        assert max(w for w in widths if w < parser.MAXREPEAT) < window
        unbounded = [p for p, w in zip(pieces, widths, strict=True) if w >= parser.MAXREPEAT]
        ends = set().union(*(_first_characters(p if first else _reversed(p))
                             for p in (_skip_anchors(parser.parse(p).data) for p in unbounded)))
        assert {ord(c) for c in runs} == ends


def adversarial_chunks(seed: int, count: int, tok) -> list[str]:
    """Whitespace-free strings of the patterns' own characters, spaCy's cases, URLs, numbers, letters."""
    alphabet = sorted({c for f in (tok.prefix_search, tok.suffix_search, tok.infix_finditer)
                       for c in f.__self__.pattern if not c.isspace()})
    pieces = [*PIECES, "http://", "https://a.b/c", "www.", ".com", "@", "10", "3.5", "1,000", "n't", "..", "\u00a0",
              "\u00e9", "\u00df", "\u4e2d", "\u0627", "\u0439", "\U0001f600", "\u0301", "\u00b2", "\u00bd", "\u20ac",
              "\u00b0", "\u00ab", "\u00bb", "\u201e", "\u201c", "\u201d", "\u2018", "\u2019", "\u2014", "\u2013"]
    cases = sorted(tok.rules)
    rng = random.Random(seed)
    out = set()
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            parts.append(rng.choice(cases) if r < 0.15 else rng.choice(pieces) if r < 0.5
                         else "".join(rng.choice("abcXYZ") for _ in range(rng.randint(1, 4))) if r < 0.6
                         else rng.choice(alphabet))
        out.add("".join("".join(parts).split()))
    return sorted(out - {""})


@pytest.mark.slow  # 20,000 adversarial chunks and the crafted texts, each through spaCy too
def test_chunk_tokens_are_spacys_tokenizers(patterns):
    # Every chunk's tokens must be spaCy's own, its document-wide special cases included.
    tok, _ = patterns
    fast = ChunkTokens(tok)
    reference = spacy.blank("en").tokenizer
    chunks = adversarial_chunks(5, 20_000, tok)
    chunks += sorted({c for _, text in crafted() if len(text) < 200_000 for c in text.split()})
    for chunk in chunks:
        assert fast.tokens(chunk) == [t.text for t in reference(chunk)], repr(chunk)


@functools.cache
def _words() -> SpacyWords:
    return SpacyWords()


@functools.cache
def _nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


def _spacy_tokens(text: str) -> list[str]:
    return [t.text.strip() for t in _nlp()(text) if t.text.strip()]


@pytest.mark.slow  # spaCy itself is quadratic on these shapes: sizes where it finishes in seconds
@pytest.mark.parametrize("size", [40, 300, 1500])
def test_the_adversarial_shapes_are_spacys_tokens_and_sentences(size):
    words = _words()
    for shape in SHAPES:
        text = shape_text(shape, size)
        assert words.tokens(text) == _spacy_tokens(text), shape
        line = text.strip()
        assert words.sentence_count(line) == max(1, len(list(_nlp()(line).sents))), shape


# The characters and pieces spaCy's affixes, infixes, special cases and URL pattern turn on.
HARD = ["'", "'s", "'S", "\u2019s", "n't", '"', "``", "''", "(", ")", "[", "]", "{", "}", "<", ">", ":", ";", ".", "..",
        "...", "\u2026", ",", "-", "--", "\u2014", "!", "?", "#", "%", "$", "+", "*", "/", "=", "&", "@", "_", "~", "^",
        "|", "\u00b0", "C", "F", "km", "1", "10", "3.5", ":)", ":-)", ";)", ":(", "<3", ":P", "(:", "=)", "o.O", "e.g.",
        "i.e.", "a.m.", "U.S.", "Mr.", "Jan.", "'em", "'cause", "http://", "https://", "www.", ".com", "example",
        "a", "b", "s", "x", "A", "D", "O", "p", "\u00e9", "\u4e2d", "\U0001f600", "\u0301", "IS_ALPHA"]
SPACES = [" ", " ", " ", "  ", "\n", "\t", "\u00a0", "\n\n", " \n"]


@pytest.mark.slow  # thousands of small texts, each through spaCy too
@settings(max_examples=1500, deadline=None, database=None)
@given(st.lists(st.one_of(st.sampled_from(HARD), st.sampled_from(SPACES)), max_size=30))
def test_fuzzed_texts_of_the_hard_pieces_are_spacys_tokens(parts):
    text = "".join(parts)
    assert _words().tokens(text) == _spacy_tokens(text)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, database=None)
@given(st.lists(st.sampled_from(["http", "://", "a", "b", ":", "@", ".", "-", "/", "?", "#", "1", "25", "com", "io",
                                 "\u00e9", "_", "+", "[", "]", "%"]), min_size=1, max_size=24))
def test_the_linear_url_match_answers_as_spacys(parts):
    chunk = "".join(parts)
    url_match = _nlp().tokenizer.url_match
    assert bool(_linear_url_match()(chunk)) == bool(url_match(chunk))


@functools.cache
def _linear_url_match():
    return linear_url_match(_nlp().tokenizer.url_match)
