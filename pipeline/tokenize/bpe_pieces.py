r"""Very long documents of a Hugging Face or tiktoken tokenizer encoded in pieces, with the whole text's ids.

The same need as pipeline/tokenize/pieces.py (SentencePiece's), with other cut points. A byte-level
BPE attaches a space to the word after it (" word") and splits on a regular expression, so a cut is
placed where that expression always ends a pre-token and no token can cross:

- before a space between two ASCII letters or digits ("foo| bar"): the space opens the next piece;
- after a newline that follows a character other than whitespace and precedes an ASCII letter or
  digit ("x\n|word"): a newline after whitespace would join it (" \n" is one pre-token of GPT-2's
  expression when the text ends there, two when a word follows).

Each piece is encoded alone and the ids are concatenated. Why that gives the whole text's ids, for a
tokenizer that qualifies (`check_tokenizer`):

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

A tokenizer that fails a rule encodes every text whole (bounded by --max_line_mb).

    >>> cut_points("aaaa\nbb cc dd", piece_chars=6, newlines=True, spaces=True)
    [5, 10]
"""

from __future__ import annotations

import json
import logging
import re

import numpy as np

from pipeline.core.memo import ProcessMemo
from pipeline.tokenize.pieces import BATCH_CHARS, LONG_TEXT_CHARS, PIECE_CHARS, SELF_TEST_TEXTS, encode_long_apart

LOG = logging.getLogger(__name__)

_NEWLINE_CUT = re.compile(r"(?<=\S\n)(?=[A-Za-z0-9])")
_SPACE_CUT = re.compile(r"(?<=[A-Za-z0-9])(?= [A-Za-z0-9])")
_CROSSES = {"newlines": re.compile(rb"\n[A-Za-z0-9]"), "spaces": re.compile(rb"[A-Za-z0-9] ")}

# Beside pieces.py's: where byte-level expressions differ (whitespace before a newline, punctuation
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


def cut_points(text: str, piece_chars: int, *, newlines: bool, spaces: bool) -> list[int]:
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


def encode_in_pieces(engine, text: str, cuts: list[int], batch_chars: int = BATCH_CHARS) -> np.ndarray:
    """The ids of `text` cut at `cuts`: each piece encoded alone, `batch_chars` of pieces per call."""
    bounds = [0, *cuts, len(text)]
    pieces = [text[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    out: list[np.ndarray] = []
    batch: list[str] = []
    size = 0
    for piece in [*pieces, None]:
        if piece is None or (batch and size + len(piece) > batch_chars):
            ids, _ = engine.encode(batch)
            out.append(ids)
            batch, size = [], 0
        if piece is not None:
            batch.append(piece)
            size += len(piece)
    return np.concatenate(out).astype(np.int32, copy=False) if out else np.zeros(0, np.int32)


CUTS = ProcessMemo(8)  # (engine type, tokenizer identity) -> check_tokenizer's answer


def identity(tokenizer) -> str:
    """What decides a tokenizer's ids: its description without the location it was loaded from."""
    described = {k: v for k, v in tokenizer.to_json().items() if k != "path"}
    return json.dumps(described, sort_keys=True)


def check_tokenizer(engine, tokenizer) -> tuple[bool, bool, str]:
    """(newline cuts are safe, space cuts are safe, why not) for a tokenizer and an engine built from it.

    Once per process, engine type and tokenizer.
    """
    return CUTS.get((type(engine), identity(tokenizer)), lambda: _check(engine, tokenizer))


def _check(engine, tokenizer) -> tuple[bool, bool, str]:
    problems = tokenizer.piece_cut_problems()
    if problems:
        return False, False, "; ".join(problems)
    tokens = tokenizer.token_bytes()
    if tokens is None:
        return False, False, "the vocabulary's bytes are unknown"
    safe = {}
    reasons = []
    for kind, crosses in _CROSSES.items():
        crossing = next((t for t in tokens if crosses.search(t)), None)
        safe[kind] = crossing is None
        if crossing is not None:
            reasons.append(f"{kind} cuts: the token {crossing!r} would cross them")
    for kind in _CROSSES:
        if not safe[kind]:
            continue
        for text in BPE_SELF_TEST_TEXTS:
            cuts = cut_points(text, 1, newlines=kind == "newlines", spaces=kind == "spaces")
            if not np.array_equal(encode_in_pieces(engine, text, cuts), engine.encode([text])[0]):
                reasons.append(f"{kind} cuts change the ids of {text[:30]!r}")
                safe[kind] = False
                break
    return safe["newlines"], safe["spaces"], "; ".join(reasons)


class BpePieceEncoder:
    """An engine (`encode(texts) -> (ids, offsets)`) of a tokenizer that encodes long texts in pieces."""

    def __init__(self, engine, tokenizer, *, long_chars: int = LONG_TEXT_CHARS, piece_chars: int = PIECE_CHARS,
                 batch_chars: int = BATCH_CHARS):
        self._engine = engine
        self._long = long_chars
        self._piece = piece_chars
        self._batch = batch_chars
        self.newlines, self.spaces, self.reason = check_tokenizer(engine, tokenizer)
        if not (self.newlines or self.spaces):
            LOG.warning("long documents are encoded whole with this tokenizer (%s): memory grows with "
                        "--max_line_mb", self.reason)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts: the engine's ids of each whole text."""
        if not (self.newlines or self.spaces):
            return self._engine.encode(texts)

        def in_pieces(text: str) -> np.ndarray:
            cuts = cut_points(text, self._piece, newlines=self.newlines, spaces=self.spaces)
            return encode_in_pieces(self._engine, text, cuts, self._batch)

        return encode_long_apart(self._engine, texts, self._long, in_pieces)
