r"""A SentencePiece `.model` as a `Tokenizer`: the reference is SentencePiece itself.

The kind (`SentencePieceTokenizer`): a serialized ModelProto, detected by its first byte; its fast
engines gigatoken and kitoken, each known to get some models wrong (`engine_problems`, from the
model's settings: sp_facts.py); the tokenizer.json gigatoken loads (`gigatoken_json`: sp_json.py's
conversion, control pieces as text); the strings the self-check puts in text (`check_strings`)
and where a very long text may be cut (`CUT_RULES`). Its manifest entry is the ids and sha256 alone.

A model's facts and its converted form are derived once per process and model (ProcessMemo):
DirectRunner's worker threads reuse what the driver derived for its self-check.

Cuts (`SentencePieceCuts`): SentencePiece holds ~30-40 bytes per character of a text it encodes at
once and its time grows faster than the length, so a very long document is encoded in pieces
(pipeline/tokenize/pieces.py). A cut is safe where no token of the whole encoding crosses it and
neither side's tokens depend on the other (BPE merges and unigram segmentations never span a
boundary that no vocabulary piece spans):

- right after a newline, when no vocabulary piece holds "\n" with other characters and the
  normalizer keeps it (Llama-2-style models: "\n" is the byte piece <0x0A>). The piece after the
  cut is encoded as "\n" + piece, so that it has the same left context as in the document, and the
  tokens of "\n" alone (with the dummy prefix) are dropped from its front;
- at a single space between two ASCII letters or digits, when the model adds a dummy prefix and
  every vocabulary piece holds "▁" only at its start: the piece after the cut is the text after the
  space, whose dummy prefix "▁" stands for that space.

Newline cuts come first; space cuts only where a stretch of the piece length has no newline.

    >>> CUT_RULES.cut_points("aaaa\nbb cc dd", piece_chars=6, newlines=True, spaces=True)
    [(5, False), (7, True)]
"""

from __future__ import annotations

import functools
import hashlib
import re

import numpy as np
import sentencepiece as spm

from pipeline.core import versions
from pipeline.core.memo import ProcessMemo
from pipeline.tokenize.kinds import sp_json
from pipeline.tokenize.kinds.base import SENTENCEPIECE, CutRules, Tokenizer, TokenizerFileError, flatten
from pipeline.tokenize.kinds.sp_facts import ModelFacts, model_problems

NEWLINE = "\n"
_SPACE_CUT = re.compile(r"(?<=[A-Za-z0-9]) (?=[A-Za-z0-9])")
_FACTS = ProcessMemo()  # model bytes -> ModelFacts
_CONVERTED = ProcessMemo()  # model bytes -> the tokenizer.json gigatoken loads


def model_facts(proto: bytes) -> ModelFacts:
    """`ModelFacts.from_proto`, once per process and model."""
    return _FACTS.get(proto, lambda: ModelFacts.from_proto(proto))


class SentencePieceCuts(CutRules):
    """Newline cuts (the next piece encoded after the newline) and space cuts (the space dropped): the module's rules.

    A cut is (position, at a space): a newline cut at i (text[i - 1] is a newline) starts the next
    piece at i; a space cut at i (text[i] == " " between two ASCII letters or digits) at i + 1.
    """

    context = NEWLINE

    def allowed(self, tokenizer: SentencePieceTokenizer) -> tuple[bool, bool, list[str]]:
        """The vocabulary and normalizer rules of the module docstring."""
        sp = tokenizer.processor
        ids = list(range(sp.get_piece_size()))  # SentencePiece's batch calls: one each, not one per id
        vocab = [piece for piece, *special in zip(sp.id_to_piece(ids), sp.is_byte(ids), sp.is_control(ids),
                                                  sp.is_unknown(ids), sp.is_unused(ids), strict=True)
                 if not any(special)]
        reasons = []
        newlines = NEWLINE in sp.normalize("a\nb") and not any(NEWLINE in p and len(p) > 1 for p in vocab)
        if not newlines:
            reasons.append("newlines are normalized away or part of longer vocabulary pieces")
        spaces = sp.normalize("a b") == "▁a▁b" and not any("▁" in p.lstrip("▁") for p in vocab)
        if not spaces:
            reasons.append("no dummy prefix, or vocabulary pieces with '▁' after other characters")
        return newlines, spaces, reasons

    def cut_points(self, text: str, piece_chars: int, *, newlines: bool, spaces: bool) -> list[tuple[int, bool]]:
        """Where to cut `text` into pieces of about `piece_chars`: (position, at a space), increasing."""
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

    def pieces(self, text: str, cuts: list[tuple[int, bool]]) -> list[tuple[str, bool]]:
        """The pieces between the cuts; one after a newline cut is encoded after the newline."""
        out = []
        start, after = 0, None  # after: how the piece starts (None: the text's start; True: a space cut)
        for pos, at_space in [*cuts, (len(text), None)]:
            out.append((text[start:pos], after is False))
            start, after = (pos + 1 if at_space else pos), at_space
        return out

    def identity(self, tokenizer: SentencePieceTokenizer) -> bytes:
        """The model's bytes."""
        return tokenizer.proto


CUT_RULES = SentencePieceCuts()


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model; `encode` runs SentencePiece on each text (threads: all cores)."""

    kind = SENTENCEPIECE
    described = "a SentencePiece .model"
    label = "SentencePiece"
    reference = "sentencepiece"
    reference_name = "SentencePiece"
    package = "sentencepiece"
    # gigatoken is ~13x SentencePiece per core, kitoken ~5-7x (docs/backends.md).
    fast = ("gigatoken", "kitoken")
    auto = ("gigatoken", "kitoken")
    specials_looked_for = "the model's own {role} piece"
    cuts = CUT_RULES

    def __init__(self, path: str, proto: bytes):
        self.path = path
        self.proto = proto
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(proto)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError variants
            raise TokenizerFileError(f"{path} is not a SentencePiece model: {e}") from None
        self.sha256 = hashlib.sha256(proto).hexdigest()
        self.files = {path.rstrip("/").rsplit("/", 1)[-1]: self.sha256}
        sp = self._sp
        self.vocab_size = sp.get_piece_size()
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = sp.bos_id(), sp.eos_id(), sp.pad_id(), sp.unk_id()
        self.special_sources = {k: "model" for k, v in (("bos", self.bos_id), ("eos", self.eos_id),
                                                          ("pad", self.pad_id), ("unk", self.unk_id)) if v >= 0}

    @functools.cached_property
    def special_tokens(self) -> dict:
        """Control pieces (<s>, </s>) -> id: never produced from text by SentencePiece."""
        ids = list(range(self.vocab_size))  # SentencePiece's batch calls: one each, not one per id
        return {p: i for p, i, control in zip(self._sp.id_to_piece(ids), ids, self._sp.is_control(ids), strict=True)
                if control}

    @property
    def processor(self) -> spm.SentencePieceProcessor:
        """The loaded `SentencePieceProcessor`."""
        return self._sp

    @property
    def facts(self) -> ModelFacts:
        """The model's settings that decide whether a fast engine reproduces it (once per process and model)."""
        return model_facts(self.proto)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The reference (ids, offsets) of the texts."""
        return flatten(self._sp.encode(list(texts)) if texts else [])

    def decode(self, ids) -> str:
        """The text of some ids."""
        return self._sp.decode([int(i) for i in ids])

    def versions(self) -> dict[str, str]:
        """The owning library and its version."""
        return {"sentencepiece": versions.package_version("sentencepiece") or spm.__version__}

    def byte_pieces(self) -> np.ndarray:
        """Per id, whether it is a byte-fallback piece (<0x..>)."""
        return np.array(self._sp.is_byte(list(range(self.vocab_size))), dtype=bool)

    def shown_token(self, token_id: int) -> str:
        """The piece of an id, as the model spells it ("▁the", "<0x0A>")."""
        return self._sp.id_to_piece(token_id)

    @classmethod
    def looks_like(cls, data: bytes, parsed: dict | None) -> bool:
        """Whether the bytes start like a serialized ModelProto: field 1 (a piece message), length-delimited."""
        return parsed is None and len(data) > 2 and data[0] == 0x0A

    def engine_problems(self, backend: str) -> list[str]:
        """Model settings a fast engine is known to get wrong (sp_facts.model_problems); none for SentencePiece."""
        return [] if backend == self.reference else model_problems(backend, self.facts)

    def gigatoken_json(self) -> str:
        """The tokenizer.json gigatoken loads for a .model, control pieces as text (once per process and model).

        gigatoken's own loader (`Tokenizer.from_sentencepiece`) lists control pieces (<s>, </s>) as
        added special tokens, which it matches in the text: a literal "<s>" in a document would become
        id 1. sp_json.py converts the model without them.
        """
        proto = self.proto
        return _CONVERTED.get(proto, lambda: sp_json.tokenizer_json(proto, model_facts(proto)))

    def check_strings(self) -> list[str]:
        """The model's own pieces a fast engine might match in text: control and user-defined pieces."""
        facts = self.facts
        return [p for p in facts.control_pieces + facts.user_defined_pieces if p]

    def manifest_facts(self) -> None:
        """Nothing beyond the ids and sha256: a .model's entry is as it always was."""
        return None


def derived() -> dict:
    """What this process derived from models (facts, conversions), for `adopt`."""
    return {"facts": _FACTS.items(), "converted": _CONVERTED.items()}


def adopt(items: dict) -> None:
    """Take what another process derived from models as this one's."""
    _FACTS.adopt(items["facts"])
    _CONVERTED.adopt(items["converted"])
