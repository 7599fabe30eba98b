"""The tokenizer model as the pipeline uses it: read once in the driver, special ids resolved.

The model file is the single source of truth. The driver reads it once (`TokenizerModel.load`):
its sha256, its ids and every check (the backend self-check too) come from those bytes. What is
shipped to workers is its path (and the resolved `SpecialIds`), never a loaded processor: each
worker loads the model in `setup()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import sentencepiece as spm

from pipeline.io.files import NotAFileError, read_bytes
from pipeline.io.urls import redact_url

SENTENCEPIECE = "sentencepiece"


def load_processor(path: str, flag: str = "--tokenizer_model") -> spm.SentencePieceProcessor:
    """Load a SentencePiece model from a local path or fsspec URL; errors name `flag`.

    Only a regular file of at most `MAX_READ_BYTES` is read (not a device, a FIFO or a folder).
    """
    try:
        proto = read_bytes(path)
    except NotAFileError as e:
        raise NotAFileError(f"{flag} {redact_url(path)!r}: {e}") from None
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(proto)
    except Exception as e:  # sentencepiece raises RuntimeError/OSError variants
        raise ValueError(f"{flag} {redact_url(path)} is not a SentencePiece model: {e}") from e
    return sp


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Special token ids from the model, with the document-boundary policy applied."""

    vocab_size: int
    bos_id: int  # -1 when the model has none
    eos_id: int
    pad_id: int
    unk_id: int
    add_bos: bool
    add_eos: bool

    @property
    def separator_id(self) -> int:
        """The token that starts every stream (context for a document's first token)."""
        return self.eos_id if self.add_eos else self.bos_id

    @property
    def padding_id(self) -> int:
        """Id written into padded positions: the model's pad id, else the separator."""
        return self.pad_id if self.pad_id >= 0 else self.separator_id


def resolve_special_ids(
    sp: spm.SentencePieceProcessor,
    *,
    add_bos: bool,
    add_eos: bool,
    bos_id: int | None = None,
    eos_id: int | None = None,
) -> SpecialIds:
    """Apply the BOS/EOS policy to a loaded SentencePiece model (`special_ids_of`)."""
    return special_ids_of(sp.get_piece_size(), sp.bos_id(), sp.eos_id(), sp.pad_id(), sp.unk_id(),
                          add_bos=add_bos, add_eos=add_eos, bos_id=bos_id, eos_id=eos_id)


def special_ids_of(vocab: int, model_bos: int, model_eos: int, pad_id: int, unk_id: int, *, add_bos: bool,
                   add_eos: bool, bos_id: int | None = None, eos_id: int | None = None) -> SpecialIds:
    """Apply the BOS/EOS policy to a model's ids; errors say what to pass when the model lacks an id."""
    bos = model_bos if bos_id is None else bos_id
    eos = model_eos if eos_id is None else eos_id
    if not (add_bos or add_eos):
        raise ValueError(
            "Documents need a boundary token: with neither EOS nor BOS, packed documents would run "
            "into each other. Keep the default EOS or pass --add_bos."
        )
    for name, wanted, value, flag in (("EOS", add_eos, eos, "--eos_id"), ("BOS", add_bos, bos, "--bos_id")):
        if wanted and value < 0:
            raise ValueError(
                f"The tokenizer model has no {name} id and the pipeline is asked to add {name}: pass "
                f"{flag} N (an id below {vocab}) or turn {name} off."
            )
        if wanted and value >= vocab:
            raise ValueError(f"{flag}={value} is outside the vocabulary (size {vocab})")
    return SpecialIds(vocab, bos, eos, pad_id, unk_id, add_bos, add_eos)


def _sentencepiece_ids(path: str, data: bytes) -> tuple[int, int, int, int, int]:
    """(vocab size, BOS, EOS, pad, unk) of a SentencePiece model's bytes."""
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except Exception as e:  # sentencepiece raises RuntimeError/OSError variants
        raise ValueError(f"{path} is not a SentencePiece model: {e}") from e
    return sp.get_piece_size(), sp.bos_id(), sp.eos_id(), sp.pad_id(), sp.unk_id()


# What each kind of model file gives the pipeline: (vocab size, BOS, EOS, pad, unk) from its bytes
# (-1 for an id the model lacks). A new kind (a tokenizer.json, a tiktoken file) is one more entry.
KINDS: dict[str, Callable[[str, bytes], tuple[int, int, int, int, int]]] = {SENTENCEPIECE: _sentencepiece_ids}


@dataclasses.dataclass(frozen=True)
class TokenizerModel:
    """A tokenizer model read once: its bytes and what the pipeline derives from them.

    Every kind offers the same interface: `kind`, `path`, `data` (the file's bytes), `sha256`,
    `vocab_size` and the model's own special ids; what is particular to a kind stays in `KINDS`.
    """

    path: str
    kind: str
    data: bytes = dataclasses.field(repr=False)
    sha256: str
    vocab_size: int
    bos_id: int  # -1 when the model has none
    eos_id: int
    pad_id: int
    unk_id: int

    @classmethod
    def load(cls, path: str, kind: str = SENTENCEPIECE) -> TokenizerModel:
        """Read the model at a local path or fsspec URL (FileNotFoundError when there is none)."""
        return cls.from_bytes(path, read_bytes(path), kind)

    @classmethod
    def from_bytes(cls, path: str, data: bytes, kind: str = SENTENCEPIECE) -> TokenizerModel:
        """The model of `kind` held in `data` (read from `path`); ValueError when it is not one."""
        if kind not in KINDS:
            raise ValueError(f"{path}: unknown kind of tokenizer model {kind!r} (known: {', '.join(KINDS)})")
        return cls(path, kind, data, hashlib.sha256(data).hexdigest(), *KINDS[kind](path, data))

    def special_ids(self, *, add_bos: bool, add_eos: bool, bos_id: int | None = None,
                    eos_id: int | None = None) -> SpecialIds:
        """The model's special ids with the BOS/EOS policy applied (`special_ids_of`)."""
        return special_ids_of(self.vocab_size, self.bos_id, self.eos_id, self.pad_id, self.unk_id,
                              add_bos=add_bos, add_eos=add_eos, bos_id=bos_id, eos_id=eos_id)


def as_model(model: TokenizerModel | str) -> TokenizerModel:
    """`model` itself, or the model read from that path."""
    return model if isinstance(model, TokenizerModel) else TokenizerModel.load(model)
