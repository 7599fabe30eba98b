"""What a SentencePiece `.model` says about itself, read without `sentencepiece_model_pb2`.

A minimal protobuf reader (the generated module needs a matching protobuf version) gives the
settings that decide whether a fast engine reproduces SentencePiece: model type, byte fallback,
normalization, whitespace handling, and the type of every piece. `model_problems` lists what each
fast engine is known to get wrong for a model (measured: tests/test_backends.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import sentencepiece as spm

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # piece types
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 2:
            length, i = _varint(buf, i)
            if i + length > len(buf):
                raise ValueError(f"not a SentencePiece model (field {field} runs past the end)")
            value, i = buf[i : i + length], i + length
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"not a SentencePiece model (protobuf wire type {wire})")
        yield field, value


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """The settings of a SentencePiece model that decide whether an engine reproduces it."""

    model_type: str
    byte_fallback: bool
    split_by_whitespace: bool
    treat_whitespace_as_suffix: bool
    normalizer: str  # "identity", "nmt_nfkc", ... ("" when a custom rule set was compiled in)
    has_charsmap: bool  # a precompiled normalization map (any normalizer but identity)
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool
    escape_whitespaces: bool
    control_pieces: tuple[str, ...]  # e.g. <s>, </s>: never produced from text by SentencePiece
    user_defined_pieces: tuple[str, ...]
    piece_types: tuple[int, ...]  # per id

    @classmethod
    def from_proto(cls, proto: bytes) -> ModelFacts:
        """Read the facts from a serialized ModelProto."""
        pieces: list[tuple[bytes, int]] = []
        trainer: dict = {}
        norm: dict = {}
        try:
            for field, value in _fields(proto):
                if field == 1:
                    pieces.append(_piece(value))
                elif field == 2:
                    trainer = dict(_fields(value))
                elif field == 3:
                    norm = dict(_fields(value))
            spm.SentencePieceProcessor().LoadFromSerializedProto(proto)  # SentencePiece must accept it too
        except (IndexError, UnicodeDecodeError, AttributeError, RuntimeError, OSError) as e:
            raise ValueError(f"not a SentencePiece model ({e})") from None
        if not pieces:
            raise ValueError("not a SentencePiece model (no pieces)")
        return cls(
            model_type=_MODEL_TYPES.get(trainer.get(3, 1), str(trainer.get(3))),
            byte_fallback=bool(trainer.get(35, 0)),
            split_by_whitespace=bool(trainer.get(22, 1)),
            treat_whitespace_as_suffix=bool(trainer.get(24, 0)),
            normalizer=norm.get(1, b"").decode("utf-8", "replace"),
            has_charsmap=bool(norm.get(2, b"")),
            add_dummy_prefix=bool(norm.get(3, 1)),
            remove_extra_whitespaces=bool(norm.get(4, 1)),
            escape_whitespaces=bool(norm.get(5, 1)),
            control_pieces=tuple(p.decode("utf-8") for p, t in pieces if t == CONTROL),
            user_defined_pieces=tuple(p.decode("utf-8") for p, t in pieces if t == USER_DEFINED),
            piece_types=tuple(t for _, t in pieces),
        )


def _piece(msg: bytes) -> tuple[bytes, int]:
    """(piece, type) of a SentencePiece message (1: piece, 2: score, 3: type), without a generator."""
    i, n, piece, kind = 0, len(msg), b"", NORMAL
    while i < n:
        key, i = _varint(msg, i)
        wire = key & 7
        if wire == 2:
            length, i = _varint(msg, i)
            if key >> 3 == 1:
                piece = msg[i : i + length]
            i += length
        elif wire == 0:
            value, i = _varint(msg, i)
            if key >> 3 == 3:
                kind = value
        else:
            i += 4 if wire == 5 else 8
    if i != n:
        raise ValueError("not a SentencePiece model (a piece runs past its end)")
    return piece, kind


def model_problems(backend: str, facts: ModelFacts) -> list[str]:
    """Model settings a fast engine is known to get wrong (measured: tests/test_backends.py)."""
    problems = []
    if facts.model_type != "bpe" or not facts.byte_fallback:
        problems.append(f"{backend} reproduces only BPE models with byte fallback "
                        f"(this one: {facts.model_type}, byte_fallback={facts.byte_fallback})")
    if facts.treat_whitespace_as_suffix or not facts.escape_whitespaces:
        problems.append(f"{backend} does not support treat_whitespace_as_suffix or escape_whitespaces=false")
    if facts.has_charsmap:
        problems.append(f"normalization {facts.normalizer or 'custom'!r}: {backend} does not reproduce "
                        "SentencePiece's precompiled normalization exactly (combining sequences, Hangul "
                        "jamo, tabs, NULs); only identity-normalized models (Llama-2 style) are supported")
    if backend == "gigatoken":
        if facts.user_defined_pieces:
            problems.append(f"the model has {len(facts.user_defined_pieces)} user-defined symbols, which "
                            "gigatoken matches before normalization (SentencePiece matches them after)")
        if facts.remove_extra_whitespaces:
            problems.append("remove_extra_whitespaces=true: gigatoken strips all Unicode whitespace where "
                            "SentencePiece strips only spaces")
    elif backend == "kitoken":
        if not facts.split_by_whitespace:
            problems.append("the model was trained with split_by_whitespace=false, which kitoken ignores")
        if facts.remove_extra_whitespaces:
            problems.append("remove_extra_whitespaces=true: kitoken encodes whitespace-only text differently")
    return problems
