"""The SentencePiece model as the pipeline uses it: loaded from any location, special ids resolved.

The `.model` file is the single source of truth. What is shipped to workers is its path (and the
resolved `SpecialIds`), never a loaded processor: each worker loads the model in `setup()`.
"""

from __future__ import annotations

import dataclasses

import sentencepiece as spm

from pipeline.io.files import NotAFileError, read_bytes
from pipeline.io.urls import redact_url


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
    """Apply the BOS/EOS policy to a model; errors say what to pass when the model lacks an id."""
    vocab = sp.get_piece_size()
    bos = sp.bos_id() if bos_id is None else bos_id
    eos = sp.eos_id() if eos_id is None else eos_id
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
    return SpecialIds(vocab, bos, eos, sp.pad_id(), sp.unk_id(), add_bos, add_eos)
