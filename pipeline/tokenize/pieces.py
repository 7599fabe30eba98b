"""Very long documents encoded in pieces, with exactly the ids of a whole-document encode, for every kind.

Why: an engine's memory (SentencePiece holds ~30-40 bytes per character of the text it encodes at
once, docs/whole-pile.md) and, for some, its time grow faster than the length. A worker encodes a
chunk's documents in one batch (~4 MB); a document longer than LONG_TEXT_CHARS is cut into pieces
of about PIECE_CHARS, encoded BATCH_CHARS of pieces at a time (or what the engine asks for:
`piece_batch_chars`), and the pieces' ids are joined.

Where a cut is safe is the kind's `CutRules` (its `cuts`: kinds/sp_model.py's for SentencePiece,
kinds/byte_level.py for tokenizer.json and tiktoken). Whether an engine and a tokenizer qualify is
decided when the engine loads (`check_cuts`): the rules' static checks, then a self-test: tricky
texts cut at every candidate place must encode to their whole-text ids, for each kind of cut on its
own. A tokenizer that fails both encodes every text whole, bounded by --max_line_mb.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.core.memo import ProcessMemo
from pipeline.tokenize.kinds.base import CutRules, Tokenizer

LOG = logging.getLogger(__name__)

LONG_TEXT_CHARS = 1 << 20  # longer texts are encoded in pieces
PIECE_CHARS = 1 << 18
BATCH_CHARS = 4 << 20  # characters of pieces encoded in one call (a chunk's worth)
CUTS = ProcessMemo(8)  # (engine type, the tokenizer's identity for its rules) -> check_cuts' answer


def encode_pieces(engine, pieces: list[tuple[str, bool]], context: str = "", context_ids: np.ndarray | None = None,
                  batch_chars: int = BATCH_CHARS) -> np.ndarray:
    """The ids of `pieces` ((text, after a newline cut), CutRules.pieces), `batch_chars` of pieces per call.

    A piece after a newline cut is encoded after `context`, whose tokens (`context_ids`) are dropped.
    """
    out: list[np.ndarray] = []
    batch: list[tuple[str, bool]] = []
    size = 0
    for piece in [*pieces, None]:
        if piece is None or (batch and size + len(piece[0]) > batch_chars):
            ids, offsets = engine.encode([context + text if after else text for text, after in batch])
            for k, (_, after) in enumerate(batch):
                got = ids[offsets[k] : offsets[k + 1]]
                if after:
                    if not np.array_equal(got[: len(context_ids)], context_ids):
                        raise RuntimeError("a piece after a newline cut did not start with the newline's tokens")
                    got = got[len(context_ids) :]
                out.append(got)
            batch, size = [], 0
        if piece is not None:
            batch.append(piece)
            size += len(piece[0]) + (len(context) if piece[1] else 0)
    return np.concatenate(out).astype(np.int32, copy=False) if out else np.zeros(0, np.int32)


def encode_long_apart(engine, texts: list[str], long_chars: int, in_pieces) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets) of the texts: the short ones in one engine batch, each longer one by `in_pieces(text)`."""
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


def check_cuts(engine, tokenizer: Tokenizer) -> tuple[bool, bool, str]:
    """(newline cuts keep the ids, space cuts keep the ids, why not) for a tokenizer and an engine over it.

    Once per process, engine type and tokenizer: engines of one type over one tokenizer give the same ids.
    """
    rules = tokenizer.cuts
    return CUTS.get((type(engine), rules.identity(tokenizer)), lambda: _check(engine, tokenizer, rules))


def _check(engine, tokenizer: Tokenizer, rules: CutRules) -> tuple[bool, bool, str]:
    newlines, spaces, reasons = rules.allowed(tokenizer)
    safe = {"newlines": newlines, "spaces": spaces}
    if not (newlines or spaces):
        return False, False, "; ".join(reasons)
    context_ids = engine.encode([rules.context])[0] if rules.context else None
    texts = list(rules.self_test_texts)
    ids, offsets = engine.encode(texts)  # one call: each costs a little of its own
    for kind in safe:
        if not safe[kind]:
            continue
        for i, text in enumerate(texts):
            cuts = rules.cut_points(text, 1, newlines=kind == "newlines", spaces=kind == "spaces")
            got = encode_pieces(engine, rules.pieces(text, cuts), rules.context, context_ids)
            if not np.array_equal(got, ids[offsets[i] : offsets[i + 1]]):
                reasons.append(f"{kind} cuts change the ids of {text[:30]!r}")
                safe[kind] = False
                break
    return safe["newlines"], safe["spaces"], "; ".join(reasons)


class PieceEncoder:
    """An engine (anything with `encode(texts) -> (ids, offsets)`) over `tokenizer` that encodes long texts in pieces.

    `batch_chars`: characters of pieces per call (default: the engine's `piece_batch_chars`, else BATCH_CHARS).
    """

    def __init__(self, engine, tokenizer: Tokenizer, *, long_chars: int = LONG_TEXT_CHARS,
                 piece_chars: int = PIECE_CHARS, batch_chars: int | None = None):
        self._engine = engine
        self._rules = tokenizer.cuts
        self._long = long_chars
        self._piece = piece_chars
        self._batch = batch_chars or getattr(engine, "piece_batch_chars", BATCH_CHARS)
        self.newlines, self.spaces, self.reason = check_cuts(engine, tokenizer)
        context = self._rules.context
        self._context_ids = engine.encode([context])[0] if self.newlines and context else None
        if not (self.newlines or self.spaces):
            LOG.warning("long documents are encoded whole with this tokenizer (%s): memory grows with "
                        "--max_line_mb", self.reason)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts: the engine's ids of each whole text."""
        if not (self.newlines or self.spaces):
            return self._engine.encode(texts)
        rules = self._rules

        def in_pieces(text: str) -> np.ndarray:
            cuts = rules.cut_points(text, self._piece, newlines=self.newlines, spaces=self.spaces)
            return encode_pieces(self._engine, rules.pieces(text, cuts), rules.context, self._context_ids,
                                 self._batch)

        return encode_long_apart(self._engine, texts, self._long, in_pieces)
