"""The tokenizer model as the pipeline uses it: read once in the driver, special ids resolved.

The model file is the single source of truth. The driver reads it once (`TokenizerModel.load`):
its kind (from its bytes), sha256, ids and every check (the backend self-check too) come from it.
Any kind of pipeline/tokenize/kinds/ (a SentencePiece .model, a Hugging Face tokenizer.json, a
tiktoken ranks file): the SentencePiece path keeps its own engines (pipeline/tokenize/engines.py),
the others load through kinds/detect.py. What is shipped to workers is the location and sha256
(`worker_encoder`) and the resolved `SpecialIds`, never a loaded processor: each worker loads the
tokenizer in `setup()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import sentencepiece as spm

from pipeline.io.files import NotAFileError, read_bytes
from pipeline.io.urls import redact_url
from pipeline.tokenize.kinds import detect
from pipeline.tokenize.kinds.base import (  # noqa: F401 -- SpecialIds is this module's public name too
    HUGGINGFACE,
    SENTENCEPIECE,
    TIKTOKEN,
    SpecialIds,
    Tokenizer,
    TokenizerFileError,
    refuse_text_boundaries,
)
from pipeline.tokenize.kinds.base import special_ids as kind_special_ids


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
                f"{flag} N (an id below {vocab}; an ordinary token's with --allow_text_eos) or turn {name} off."
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


def _tokenizer_ids(tokenizer: Tokenizer) -> tuple[int, int, int, int, int]:
    """(vocab size, BOS, EOS, pad, unk) of a loaded tokenizer of kinds/ (its own config's ids)."""
    return tokenizer.vocab_size, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id, tokenizer.unk_id


# What each kind of model file gives the pipeline: (vocab size, BOS, EOS, pad, unk) (-1 for an id the
# model lacks), from the file's bytes (SentencePiece) or from its loaded `Tokenizer` (the others).
KINDS: dict[str, Callable] = {SENTENCEPIECE: _sentencepiece_ids, HUGGINGFACE: _tokenizer_ids,
                              TIKTOKEN: _tokenizer_ids}


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
    # The loaded tokenizer (kinds other than SentencePiece): the self-check's reference and the manifest's facts.
    tokenizer: Tokenizer | None = dataclasses.field(default=None, repr=False, compare=False)
    tiktoken_name: str | None = None  # the built-in pattern and specials of a tiktoken ranks file

    @classmethod
    def load(cls, path: str, kind: str | None = None, *, tiktoken_name: str | None = None) -> TokenizerModel:
        """Read the tokenizer at a local path or fsspec URL, its kind detected unless given.

        FileNotFoundError when there is none; TokenizerFileError (a ValueError naming the file) when it
        is of no known kind or cannot be used.
        """
        directory = kind is None and detect.is_dir(path)
        data = None if directory else read_bytes(path)
        if kind is None:
            kind = HUGGINGFACE if directory else detect.kind_of(redact_url(path), data)
        if kind == SENTENCEPIECE:
            if tiktoken_name is not None:
                raise TokenizerFileError(f"{redact_url(path)}: a SentencePiece model, not a tiktoken ranks "
                                         f"file: --tiktoken_encoding {tiktoken_name} does not apply")
            return cls.from_bytes(path, data, kind)
        expected = None if data is None else hashlib.sha256(data).hexdigest()
        return cls.of_tokenizer(path, detect.load_tokenizer(path, tiktoken_name=tiktoken_name,
                                                            expected_sha256=expected), tiktoken_name)

    @classmethod
    def from_bytes(cls, path: str, data: bytes, kind: str = SENTENCEPIECE) -> TokenizerModel:
        """The SentencePiece model held in `data` (read from `path`); ValueError when it is not one."""
        if kind != SENTENCEPIECE:
            raise ValueError(f"{path}: unknown kind of tokenizer model {kind!r} (known: {', '.join(KINDS)}; "
                             "the others load with TokenizerModel.load)")
        return cls(path, kind, data, hashlib.sha256(data).hexdigest(), *KINDS[kind](path, data))

    @classmethod
    def of_tokenizer(cls, path: str, tokenizer: Tokenizer, tiktoken_name: str | None = None) -> TokenizerModel:
        """The model of a loaded tokenizer of kinds/ (read from `path`)."""
        if tokenizer.kind not in KINDS:
            raise ValueError(f"{path}: unknown kind of tokenizer model {tokenizer.kind!r}")
        return cls(path, tokenizer.kind, getattr(tokenizer, "data", b""), tokenizer.sha256,
                   *KINDS[tokenizer.kind](tokenizer), tokenizer=tokenizer, tiktoken_name=tiktoken_name)

    def special_ids(self, *, add_bos: bool, add_eos: bool, bos_id: int | None = None,
                    eos_id: int | None = None, pad_id: int | None = None, allow_text: bool = False) -> SpecialIds:
        """The model's special ids with the BOS/EOS policy applied (flags win over the model's own ids).

        A --bos_id/--eos_id that is an ordinary token of the model is refused unless `allow_text`.
        """
        if self.kind != SENTENCEPIECE:
            return kind_special_ids(self.tokenizer, add_bos=add_bos, add_eos=add_eos, bos_id=bos_id, eos_id=eos_id,
                                    pad_id=pad_id, allow_text=allow_text)
        special = special_ids_of(self.vocab_size, self.bos_id, self.eos_id, self.pad_id, self.unk_id,
                                 add_bos=add_bos, add_eos=add_eos, bos_id=bos_id, eos_id=eos_id)
        if not allow_text and (bos_id is not None or eos_id is not None):
            sp = spm.SentencePieceProcessor()
            sp.LoadFromSerializedProto(self.data)
            control = {i for i in range(self.vocab_size) if sp.is_control(i)}
            refuse_text_boundaries(redact_url(self.path), {"bos": bos_id if add_bos else None,
                                                           "eos": eos_id if add_eos else None},
                                   {"bos": self.bos_id, "eos": self.eos_id}, control, sp.id_to_piece)
        if pad_id is None:
            return special
        if not 0 <= pad_id < self.vocab_size:
            raise ValueError(f"--pad_id={pad_id} is outside the vocabulary (size {self.vocab_size})")
        return dataclasses.replace(special, pad_id=pad_id)

    def facts(self) -> dict | None:
        """The tokenizer's description for the manifest (kind, files, sources, versions); None for SentencePiece."""
        if self.tokenizer is None:
            return None
        out = self.tokenizer.to_json()
        if self.tiktoken_name is not None:
            out["tiktoken_encoding"] = self.tiktoken_name
        return out

    def worker_encoder(self, backend: str, *, verify: bool = False, threads: int | None = None):
        """What each worker loads the checked tokenizer with (`WorkerTokenizer.encoder`)."""
        return WorkerTokenizer(self.path, self.kind, self.sha256, self.tiktoken_name).encoder(
            backend, verify=verify, threads=threads)


@dataclasses.dataclass(frozen=True)
class WorkerTokenizer:
    """Where workers load the tokenizer the driver checked: location, kind, sha256 (small; pickles as it is)."""

    path: str
    kind: str = SENTENCEPIECE
    sha256: str | None = None
    tiktoken_name: str | None = None

    def encoder(self, backend: str, *, verify: bool = False, threads: int | None = None):
        """The batch encoder of `backend`: engines.Encoder for SentencePiece, kind_engines.KindEncoder otherwise."""
        if self.kind == SENTENCEPIECE:
            from pipeline.tokenize.engines import Encoder

            return Encoder(self.path, backend, verify=verify, threads=threads)
        from pipeline.tokenize.kind_engines import KindEncoder

        return KindEncoder(self.path, backend, sha256=self.sha256, tiktoken_name=self.tiktoken_name, verify=verify,
                           threads=threads)


def as_model(model: TokenizerModel | str) -> TokenizerModel:
    """`model` itself, or the model read from that path."""
    return model if isinstance(model, TokenizerModel) else TokenizerModel.load(model)
