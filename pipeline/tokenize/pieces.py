r"""Very long documents tokenized in pieces, with exactly the ids of a whole-document encode.

Why: SentencePiece holds ~30-40 bytes per character of the text it encodes at once (measured in
docs/whole-pile.md: a 64 MB document takes GBs) and its time grows faster than the length. A worker
encodes a chunk's documents in one batch (~4 MB); a document longer than LONG_TEXT_CHARS is cut
into pieces of about PIECE_CHARS, encoded BATCH_CHARS of pieces at a time.

Where a cut is safe, i.e. no token of the whole encoding crosses it and neither side's tokens depend
on the other (BPE merges and unigram segmentations never span a boundary that no vocabulary piece
spans):

- right after a newline, when no vocabulary piece holds "\n" with other characters and the
  normalizer keeps it (Llama-2-style models: "\n" is the byte piece <0x0A>). The piece after the
  cut is encoded as "\n" + piece, so that it has the same left context as in the document, and the
  tokens of "\n" alone (with the dummy prefix) are dropped from its front;
- at a single space between two ASCII letters or digits, when the model adds a dummy prefix and
  every vocabulary piece holds "▁" only at its start: the piece after the cut is the text after the
  space, whose dummy prefix "▁" stands for that space.

Newline cuts come first; space cuts only where a stretch of PIECE_CHARS has no newline. A text
with neither (a long base64 blob, minified code) is encoded whole, bounded by --max_line_mb.

Whether a model qualifies is decided when its engine loads (`check_model`): the vocabulary and
normalizer rules above, then a self-test: tricky texts cut at every possible place must encode to
their whole-text ids. A model that fails encodes every text whole.

    >>> cut_points("aaaa\nbb cc dd", piece_chars=6, newlines=True, spaces=True)
    [(5, False), (7, True)]
"""

from __future__ import annotations

import logging
import re

import numpy as np
import sentencepiece as spm

from pipeline.core.memo import ProcessMemo

LOG = logging.getLogger(__name__)

LONG_TEXT_CHARS = 1 << 20  # longer texts are encoded in pieces
PIECE_CHARS = 1 << 18
BATCH_CHARS = 4 << 20  # characters of pieces encoded in one call (a chunk's worth)
NEWLINE = "\n"
_SPACE_CUT = re.compile(r"(?<=[A-Za-z0-9]) (?=[A-Za-z0-9])")

# Texts the self-test cuts at every newline and every safe space (short: it runs on every worker).
SELF_TEST_TEXTS = (
    "first line\nsecond line\n\nthird after a blank line\n",
    "\nleading newline\n  indented\n\tTabbed\n    four spaces\n",
    "windows\r\nline ends\r\n\r\nand trailing spaces   \n   \nend",
    "digits 12345\n67890 and 3.14159\n2718 281828",
    "▁literal▁marks\n▁after\n▁▁a newline and a b c d e f",
    "unicode café naïve\n数据 中文没有空格\n한국어 텍스트\nemoji 🙂🙃\n\u2028sep\u2029para",
    "specials <s> </s> <unk> <pad>\n<s>at the start\n</s>",
    "combining e\u0301\n\u0301 after newline\nzero\u200bwidth\n\u200djoiner",
    "x\ny\nz\n\n\n\n" + "ab cd " * 20 + "\n" + "word " * 30,
    "code:\n    def f(x):\n        return x + 1\n\n    if a and b:\n        pass\n",
)


def cut_points(text: str, piece_chars: int, *, newlines: bool, spaces: bool) -> list[tuple[int, bool]]:
    """Where to cut `text` into pieces of about `piece_chars`: (position, at a space), increasing.

    A newline cut at i (text[i - 1] is a newline): the next piece starts at i. A space cut at i
    (text[i] == " " between two ASCII letters or digits): the next piece starts at i + 1.
    """
    cuts: list[tuple[int, bool]] = []
    start = 0
    while len(text) - start > piece_chars:
        end = start + piece_chars
        cut = None
        if newlines and (j := text.rfind(NEWLINE, start, end)) >= 0:
            cut = (j + 1, False)
        if cut is None and spaces:
            last = None
            for match in _SPACE_CUT.finditer(text, start + 1, end):
                last = match
            cut = (last.start(), True) if last else None
        if cut is None:  # nothing in this stretch: the first safe place after it
            later = []
            if newlines and (j := text.find(NEWLINE, end)) >= 0:
                later.append((j + 1, False))
            if spaces and (m := _SPACE_CUT.search(text, end)):
                later.append((m.start(), True))
            if not later:
                break
            cut = min(later)
        if cut[0] >= len(text):
            break
        cuts.append(cut)
        start = cut[0] + 1 if cut[1] else cut[0]
    return cuts


def encode_in_pieces(engine, text: str, cuts: list[tuple[int, bool]], newline_ids: np.ndarray | None,
                     batch_chars: int = BATCH_CHARS) -> np.ndarray:
    """The ids of `text` cut at `cuts` (see `cut_points`), each piece encoded as the module docstring says."""
    pieces = []  # (text to encode, tokens to drop from its front)
    start, after = 0, None  # after: how the piece starts (None: the text's start; True: a space cut)
    for pos, at_space in [*cuts, (len(text), None)]:
        if after is False:
            pieces.append((NEWLINE + text[start:pos], len(newline_ids)))
        else:
            pieces.append((text[start:pos], 0))
        start, after = (pos + 1 if at_space else pos), at_space
    out: list[np.ndarray] = []
    batch: list = []
    size = 0
    for piece in [*pieces, None]:
        if piece is None or (batch and size + len(piece[0]) > batch_chars):
            ids, offsets = engine.encode([p for p, _ in batch])
            for k, (_, drop) in enumerate(batch):
                got = ids[offsets[k] : offsets[k + 1]]
                if drop and not np.array_equal(got[:drop], newline_ids):
                    raise RuntimeError("a piece after a newline cut did not start with the newline's tokens")
                out.append(got[drop:])
            batch, size = [], 0
        if piece is not None:
            batch.append(piece)
            size += len(piece[0])
    return np.concatenate(out).astype(np.int32, copy=False)


class PieceEncoder:
    """An engine (anything with `encode(texts) -> (ids, offsets)`) that encodes long texts in pieces."""

    def __init__(self, engine, proto: bytes, *, long_chars: int = LONG_TEXT_CHARS, piece_chars: int = PIECE_CHARS,
                 batch_chars: int = BATCH_CHARS):
        self._engine = engine
        self._long = long_chars
        self._piece = piece_chars
        self._batch = batch_chars
        self.newlines, self.spaces, self.reason = check_model(engine, proto)
        self._newline_ids = engine.encode([NEWLINE])[0] if self.newlines else None
        if not (self.newlines or self.spaces):
            LOG.warning("long documents are encoded whole with this model (%s): memory grows with "
                        "--max_line_mb", self.reason)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts: the engine's ids of each whole text."""
        if not (self.newlines or self.spaces):
            return self._engine.encode(texts)

        def in_pieces(text: str) -> np.ndarray:
            cuts = cut_points(text, self._piece, newlines=self.newlines, spaces=self.spaces)
            return encode_in_pieces(self._engine, text, cuts, self._newline_ids, self._batch)

        return encode_long_apart(self._engine, texts, self._long, in_pieces)


def encode_long_apart(engine, texts: list[str], long_chars: int, in_pieces) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets) of the texts: the short ones in one engine batch, each longer one by `in_pieces(text)`.

    Shared by every kind's piece encoder (this module's, pipeline/tokenize/bpe_pieces.py's).
    """
    if all(len(t) <= long_chars for t in texts):
        return engine.encode(texts)
    per_text: list = [None] * len(texts)
    short = [i for i, t in enumerate(texts) if len(t) <= long_chars]
    ids, offsets = engine.encode([texts[i] for i in short])
    for k, i in enumerate(short):
        per_text[i] = ids[offsets[k] : offsets[k + 1]]
    for i, text in enumerate(texts):
        if per_text[i] is None:
            per_text[i] = in_pieces(text)
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(x) for x in per_text], out=offsets[1:])
    return np.concatenate(per_text).astype(np.int32, copy=False), offsets


CUTS = ProcessMemo(8)  # (engine type, model bytes) -> check_model's answer


def check_model(engine, proto: bytes) -> tuple[bool, bool, str]:
    """(newline cuts are safe, space cuts are safe, why not) for a model and an engine built from it.

    Once per process, engine type and model: engines of one type built from one model give the same ids.
    """
    return CUTS.get((type(engine), proto), lambda: _check_model(engine, proto))


def _check_model(engine, proto: bytes) -> tuple[bool, bool, str]:
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    ids = list(range(sp.get_piece_size()))  # SentencePiece's batch calls: one each, not one per id
    vocab = [piece for piece, *special in zip(sp.id_to_piece(ids), sp.is_byte(ids), sp.is_control(ids),
                                              sp.is_unknown(ids), sp.is_unused(ids), strict=True) if not any(special)]
    reasons = []
    newlines = NEWLINE in sp.normalize("a\nb") and not any(NEWLINE in p and len(p) > 1 for p in vocab)
    if not newlines:
        reasons.append("newlines are normalized away or part of longer vocabulary pieces")
    spaces = sp.normalize("a b") == "▁a▁b" and not any("▁" in p.lstrip("▁") for p in vocab)
    if not spaces:
        reasons.append("no dummy prefix, or vocabulary pieces with '▁' after other characters")
    newline_ids = engine.encode([NEWLINE])[0]
    ids, offsets = engine.encode(list(SELF_TEST_TEXTS))  # one call: each costs ~1 ms of its own
    for kind in ("newlines", "spaces"):
        if not (newlines if kind == "newlines" else spaces):
            continue
        for i, text in enumerate(SELF_TEST_TEXTS):
            cuts = cut_points(text, 1, newlines=kind == "newlines", spaces=kind == "spaces")
            whole = ids[offsets[i] : offsets[i + 1]]
            if not np.array_equal(encode_in_pieces(engine, text, cuts, newline_ids), whole):
                reasons.append(f"{kind} cuts change the ids of {text[:30]!r}")
                newlines, spaces = (False, spaces) if kind == "newlines" else (newlines, False)
                break
    return newlines, spaces, "; ".join(reasons)
