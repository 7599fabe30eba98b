r"""Where a byte-level BPE's very long texts may be cut: the cuts Hugging Face and tiktoken tokenizers share.

Cuts (`ByteLevelCuts`): a very long document is encoded in pieces with the whole text's ids
(pipeline/tokenize/pieces.py). A byte-level BPE attaches a space to the word after it (" word") and
splits on a regular expression, so a cut is placed where that expression always ends a pre-token
and no token can cross:

- before a space between two ASCII letters or digits ("foo| bar"): the space opens the next piece;
- after a newline that follows a character other than whitespace and precedes an ASCII letter or
  digit ("x\n|word"): a newline after whitespace would join it (" \n" is one pre-token of GPT-2's
  expression when the text ends there, two when a word follows).

Each piece is encoded alone and the ids are concatenated. Why that gives the whole text's ids, for a
tokenizer that qualifies (`ByteLevelCuts.allowed`, then pieces.py's self-test):

1. no token of the vocabulary (nor a non-special added token) holds the two characters around a cut
   ("\n" + letter, letter + " "), so no token of the whole encoding crosses it, and a BPE merge (or a
   Unigram segmentation) on one side never depends on the other;
2. the split pattern does not look behind, so the pre-tokens of the piece after a cut are those of
   the whole text from there; the piece before it ends with a letter, a digit or "x\n", where the
   known expressions (GPT-2, cl100k, o200k, Llama 3) end a pre-token with or without the text after;
3. nothing depends on where a text starts (no prefix space, no `Prepend` normalizer, no Metaspace:
   `Tokenizer.piece_cut_problems`);
4. a self-test on this tokenizer: tricky texts cut at every candidate place must encode to their
   whole-text ids, for each kind of cut on its own.

    >>> CUT_RULES.cut_points("aaaa\nbb cc dd", piece_chars=6, newlines=True, spaces=True)
    [5, 10]
"""

from __future__ import annotations

import json
import re

from pipeline.tokenize.kinds.base import SELF_TEST_TEXTS, CutRules, Tokenizer

_NEWLINE_CUT = re.compile(r"(?<=\S\n)(?=[A-Za-z0-9])")
_SPACE_CUT = re.compile(r"(?<=[A-Za-z0-9])(?= [A-Za-z0-9])")
_CROSSES = {"newlines": re.compile(rb"\n[A-Za-z0-9]"), "spaces": re.compile(rb"[A-Za-z0-9] ")}

# Beside every kind's: where byte-level expressions differ (whitespace before a newline, punctuation
# glued to newlines, contractions, digit groups, case splits, letters that change when lowercased).
BPE_SELF_TEST_TEXTS = (
    *SELF_TEST_TEXTS,
    "x\nword\n\nword \nword  \nword\t\nword.\nword,\n\nword\r\nword\n1234\n5 6",
    "it's they're I'M we'll\nit's\ndon't stop 12345 678 9\n0x1F 3.14 1,000,000",
    "fooBar BAZqux CamelCase\nHTTPServer x\nÉcole ΟΔΟΣ οδος\nΣ foo ΣΑΣ bar",
    "a  b   c\n    d\n\t\te f\u00a0g h\u3000i j\u2028k l\u0085m n",
    "<|endoftext|> a <|endoftext|>\nb<|endoftext|>c <s> d </s>\ne [CLS] f",
    "https://example.com/a/b?c=d e\nmail@example.com f\n#include <stdio.h>\nint x = 1;",
    "数据 abc 中文 def\n한국어 ghi\n🙂 jkl 🙃\nmno 👍🏽 pqr\ne\u0301 stu",
)


class ByteLevelCuts(CutRules):
    """Cuts before a space and after a newline, as the module says; a cut is the position the next piece starts at."""

    self_test_texts = BPE_SELF_TEST_TEXTS

    def allowed(self, tokenizer: Tokenizer) -> tuple[bool, bool, list[str]]:
        """Rules 1 and 3: the tokenizer's structure, and no token across either kind of cut."""
        problems = tokenizer.piece_cut_problems()
        if problems:
            return False, False, problems
        tokens = tokenizer.token_bytes()
        if tokens is None:
            return False, False, ["the vocabulary's bytes are unknown"]
        safe, reasons = {}, []
        for kind, crosses in _CROSSES.items():
            crossing = next((t for t in tokens if crosses.search(t)), None)
            safe[kind] = crossing is None
            if crossing is not None:
                reasons.append(f"{kind} cuts: the token {crossing!r} would cross them")
        return safe["newlines"], safe["spaces"], reasons

    def cut_points(self, text: str, piece_chars: int, *, newlines: bool, spaces: bool) -> list[int]:
        """Where the pieces of `text` after the first start: increasing positions, pieces of about `piece_chars`.

        The last newline cut inside each stretch of `piece_chars`, else its last space cut, else the
        first cut of either kind after it.
        """
        cuts: list[int] = []
        start = 0
        while len(text) - start > piece_chars:
            end = start + piece_chars
            cut = None
            for kind, pattern in (("newlines", _NEWLINE_CUT), ("spaces", _SPACE_CUT)):
                if cut is None and (newlines if kind == "newlines" else spaces):
                    last = None
                    for match in pattern.finditer(text, start + 1, end + 1):
                        last = match
                    cut = last.start() if last else None
            if cut is None:
                later = [m.start() for kind, pattern in (("newlines", _NEWLINE_CUT), ("spaces", _SPACE_CUT))
                         if (newlines if kind == "newlines" else spaces) and (m := pattern.search(text, end))]
                if not later:
                    break
                cut = min(later)
            if cut >= len(text):
                break
            cuts.append(cut)
            start = cut
        return cuts

    def pieces(self, text: str, cuts: list[int]) -> list[tuple[str, bool]]:
        """The pieces between the cuts, each encoded alone."""
        bounds = [0, *cuts, len(text)]
        return [(text[a:b], False) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def identity(self, tokenizer: Tokenizer) -> str:
        """What decides a tokenizer's ids: its description without the location it was loaded from."""
        described = {k: v for k, v in tokenizer.to_json().items() if k != "path"}
        return json.dumps(described, sort_keys=True)


CUT_RULES = ByteLevelCuts()

