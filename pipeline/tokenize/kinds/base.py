"""What every kind of tokenizer file offers the pipeline: `Tokenizer`, and the errors of loading one.

A `Tokenizer` is loaded from the user's files only (nothing is ever downloaded). Its `encode` is the
reference: the owning library's own encode of each text, with special-token strings in the text
encoded as text (never as control ids), no BOS/EOS. Its ids fit below `vocab_size`; its special ids
(`bos_id`, `eos_id`, `pad_id`, `unk_id`, -1 when absent) come from the tokenizer's own files, and
`special_sources` says which file named each.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools

import numpy as np

SENTENCEPIECE = "sentencepiece"
HUGGINGFACE = "huggingface"
TIKTOKEN = "tiktoken"
KINDS = (SENTENCEPIECE, HUGGINGFACE, TIKTOKEN)


class TokenizerFileError(ValueError):
    """A tokenizer file (or one of its companions) that cannot be used; the message names the file."""


class UnknownTokenizerKind(TokenizerFileError):
    """A file that is none of the kinds the pipeline takes."""


MAX_TOKEN_ID = 2**31 - 1  # the records and every engine hold ids as int32


def check_ids_fit(path: str, ids: dict) -> None:
    """Refuse a tokenizer with an id past int32 or below 0 (`ids`: token -> id), naming the file and the token."""
    ids = {token: i for token, i in ids.items() if isinstance(i, int)}
    if not ids:
        return
    token, worst = max(ids.items(), key=lambda kv: kv[1])
    if worst > MAX_TOKEN_ID:
        raise TokenizerFileError(f"{path}: token {token!r} has id {worst:,}, past the largest id the records hold "
                                 f"(int32: {MAX_TOKEN_ID:,})")
    token, least = min(ids.items(), key=lambda kv: kv[1])
    if least < 0:
        raise TokenizerFileError(f"{path}: token {token!r} has a negative id ({least})")


def flatten(lists: list) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets) of a list of id lists: one flat int32 array, text i at ids[offsets[i]:offsets[i + 1]]."""
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(lists), np.int32, int(offsets[-1]))
    return ids, offsets


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


class Tokenizer(abc.ABC):
    """A loaded tokenizer of one kind. Subclasses set the attributes in their constructor."""

    kind: str  # one of KINDS
    path: str  # the location it was loaded from, as shown (a URL with credentials redacted)
    sha256: str  # of the main file: the .model, tokenizer.json or the ranks file
    files: dict  # every file read: name -> sha256 (companions included)
    vocab_size: int  # every id is below it (special and added tokens included)
    bos_id: int = -1
    eos_id: int = -1
    pad_id: int = -1
    unk_id: int = -1
    special_sources: dict  # "bos"/"eos"/"pad"/"unk" -> where the id came from
    special_tokens: dict  # control strings -> id: never produced from text by `encode`

    @abc.abstractmethod
    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The reference (ids, offsets) of the texts, without BOS/EOS."""

    @abc.abstractmethod
    def decode(self, ids) -> str:
        """The text of some ids."""

    @abc.abstractmethod
    def versions(self) -> dict[str, str]:
        """The owning library's name and version (what the reference ids depend on)."""

    def token_bytes(self) -> list[bytes] | None:
        """The bytes of every token the model can produce from text, or None when unknown."""
        return None

    def piece_cut_problems(self) -> list[str]:
        """Why this tokenizer's structure does not allow cutting long texts (pipeline/tokenize/bpe_pieces.py)."""
        return ["no rule for cutting this kind of tokenizer"]

    def encode_one(self, text: str) -> list[int]:
        """The reference ids of one text."""
        ids, _ = self.encode([text])
        return ids.tolist()

    def to_json(self) -> dict:
        """The manifest's description: kind, file, sha256, vocab size, special ids and their sources, versions."""
        return {
            "kind": self.kind,
            "path": self.path,
            "sha256": self.sha256,
            "files": dict(sorted(self.files.items())),
            "vocab_size": self.vocab_size,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "special_sources": dict(sorted(self.special_sources.items())),
            "versions": self.versions(),
        }


def refuse_text_boundaries(path: str, given: dict[str, int | None], own: dict[str, int], control: set[int],
                           shown=str) -> None:
    """Refuse a --bos_id/--eos_id (`given`: role -> the flag's id) naming an ordinary token of the vocabulary.

    Text produces ordinary tokens, so such a boundary would be indistinguishable from text. The
    tokenizer's own id for the role and its special/control tokens (`control`) are boundaries; `shown`
    gives an id's token for the message.
    """
    for role, value in given.items():
        if value is None or value == own.get(role) or value in control:
            continue
        try:
            token = shown(value)
        except Exception:  # noqa: BLE001 -- the message only: any library's failure to show a token
            token = "?"
        raise ValueError(f"--{role}_id {value}: {token!r} is an ordinary token of {path}, which text produces "
                         f"too: its {role.upper()} would be indistinguishable from text. Name a special (control) "
                         f"token, or pass --allow_text_eos to use it anyway")


def special_ids(tokenizer: Tokenizer, *, add_bos: bool, add_eos: bool, bos_id: int | None = None,
                eos_id: int | None = None, pad_id: int | None = None, allow_text: bool = False):
    """The document-boundary policy applied to a tokenizer of any kind: a `SpecialIds`.

    Overrides (flags) win over the tokenizer's own ids; a policy that needs an id the tokenizer lacks,
    an id outside the vocabulary, or (without `allow_text`) a boundary id that is an ordinary token
    is a ValueError naming the flag and where the ids were looked for.
    """
    if not (add_bos or add_eos):
        raise ValueError("Documents need a boundary token: with neither EOS nor BOS, packed documents would run "
                         "into each other. Keep the default EOS or pass --add_bos.")
    looked = {
        SENTENCEPIECE: "the .model",
        HUGGINGFACE: "{role}_token in tokenizer_config.json / special_tokens_map.json, the post-processor's template",
        TIKTOKEN: "{role}_token in the ranks file's JSON or the built-in encoding",
    }[tokenizer.kind]
    chosen = {}
    for role, wanted, value in (("bos", add_bos, bos_id), ("eos", add_eos, eos_id), ("pad", False, pad_id)):
        own = getattr(tokenizer, f"{role}_id")
        chosen[role] = own if value is None else value
        flag = f"--{role}_id"
        if value is not None and not 0 <= value < tokenizer.vocab_size:
            raise ValueError(f"{flag}={value} is outside the vocabulary of {tokenizer.path} "
                             f"(size {tokenizer.vocab_size})")
        if wanted and chosen[role] < 0:
            raise ValueError(f"The tokenizer {tokenizer.path} ({tokenizer.kind}) has no {role.upper()} id (looked for "
                             f"{looked.format(role=role)}) and the pipeline is asked to add {role.upper()}: pass "
                             f"{flag} N (an id below {tokenizer.vocab_size}; an ordinary token's with "
                             f"--allow_text_eos) or turn {role.upper()} off.")
    if not allow_text:
        refuse_text_boundaries(tokenizer.path, {"bos": bos_id if add_bos else None, "eos": eos_id if add_eos else None},
                               {"bos": tokenizer.bos_id, "eos": tokenizer.eos_id},
                               set(tokenizer.special_tokens.values()), lambda i: tokenizer.decode([i]))
    return SpecialIds(tokenizer.vocab_size, chosen["bos"], chosen["eos"], chosen["pad"], tokenizer.unk_id,
                      add_bos, add_eos)
