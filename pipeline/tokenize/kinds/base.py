"""What every kind of tokenizer file offers the pipeline: `Tokenizer`, `CutRules`, the errors of loading one.

A kind is one subclass of `Tokenizer` (one module of kinds/ and one row of kinds/registry.py). The
class says what the kind is, the instance is a file of it loaded:

    detection   `looks_like(data, parsed)`: a file's bytes (and their JSON object, if they are one)
    loading     `load(files, tiktoken_name=)`: the main file's bytes and the files beside it
                (`TokenizerFiles`); a directory holds a tokenizer when the kind names its `directory_file`
    engines     `reference` (the owning library's encode, the `--tokenizer_backend` fast engines are
                checked against), `fast` (as --help lists them), `auto` (the order `auto` tries them),
                `engine_problems(backend)` (what an engine is known to get wrong for this file), and
                `gigatoken_json()` where gigatoken is one of them
    self-check  `check_strings()`: the strings that must stay text (its special tokens, control pieces)
    long texts  `cuts`: its `CutRules`, where very long texts may be cut (pipeline/tokenize/pieces.py)
    manifest    `manifest_facts()`: the manifest's description of the tokenizer

A `Tokenizer` is loaded from the user's files only (nothing is ever downloaded). Its `encode` is the
reference: the owning library's own encode of each text, with special-token strings in the text
encoded as text (never as control ids), no BOS/EOS. Its ids fit below `vocab_size`; its special ids
(`bos_id`, `eos_id`, `pad_id`, `unk_id`, -1 when absent) come from the tokenizer's own files, and
`special_sources` says which file named each; `special_ids` applies the job's boundary policy.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import json
import posixpath
from collections.abc import Callable, Hashable, Sequence

import numpy as np

SENTENCEPIECE = "sentencepiece"
HUGGINGFACE = "huggingface"
TIKTOKEN = "tiktoken"
AUTO = "auto"  # the --tokenizer_backend that tries a kind's fast engines in order


class TokenizerFileError(ValueError):
    """A tokenizer file (or one of its companions) that cannot be used; the message names the file."""


class UnknownTokenizerKind(TokenizerFileError):
    """A file that is none of the kinds the pipeline takes."""


class TokenizerFileMissing(TokenizerFileError, FileNotFoundError):
    """No tokenizer file where one was named."""


def json_object(data: bytes, path: str) -> dict | None:
    """The JSON object a file's bytes hold (a byte-order mark and leading blanks skipped), else None."""
    text = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
    except RecursionError:
        raise TokenizerFileError(f"{path}: JSON nested too deeply to be a tokenizer file") from None


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
    """A tokenizer's files as its kind's `load` gets them: the main file's bytes, and the files beside it."""

    shown: str  # the location as given, credentials redacted: what messages and the manifest show
    main: str  # the main file's location (a directory's `directory_file`): read, never shown
    data: bytes  # the main file's bytes
    read: Callable[[str], bytes | None]  # a location's bytes, None when there is no such file

    def beside(self, name: str) -> bytes | None:
        """The bytes of the file `name` in the main file's folder, or None when there is none."""
        folder = posixpath.dirname(self.main)
        return self.read(posixpath.join(folder, name) if folder else name)


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
    """A kind of tokenizer file (the class) and one loaded (an instance): see the module docstring.

    A subclass declares the kind's attributes below and sets the instance's in its constructor.
    """

    # The kind, declared by each subclass.
    kind: str  # its name: its row in kinds/registry.py's KINDS, the manifest's `tokenizer.kind`
    described: str  # how a message names a file of the kind ("a SentencePiece .model")
    label: str  # how --help names the kind ("SentencePiece", "tokenizer.json")
    directory_file: str | None = None  # the main file's name in a directory that holds the tokenizer
    reference: str  # the --tokenizer_backend of the owning library's own encode
    reference_name: str  # how messages name the reference ("ids different from SentencePiece's")
    package: str  # the owning library's package (the reference's and its own batch engines')
    fast: tuple[str, ...] = ()  # the fast engines, as --help lists them
    auto: tuple[str, ...] = ()  # the fast engines `auto` tries, in order: fastest first
    backends: tuple[str, ...] = ()  # every --tokenizer_backend of the kind: reference, fast engines, auto (derived)
    cuts: CutRules  # where its very long texts may be cut
    specials_looked_for: str = "its files"  # where its own special ids are looked for ("{role}": bos, eos)

    # A file of it, loaded.
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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if hasattr(cls, "reference"):
            cls.backends = (cls.reference, *cls.fast, AUTO)

    @classmethod
    @abc.abstractmethod
    def looks_like(cls, data: bytes, parsed: dict | None) -> bool:
        """Whether a file's bytes are of this kind (`parsed`: the JSON object they hold, None when they hold none)."""

    @classmethod
    def load(cls, files: TokenizerFiles, *, tiktoken_name: str | None = None) -> Tokenizer:
        """The tokenizer of these files: by default the main file's bytes alone.

        `tiktoken_name`: a built-in pattern and special tokens, which only a tiktoken ranks file takes.
        """
        cls.refuse_encoding_name(files, tiktoken_name)
        return cls(files.shown, files.data)

    @classmethod
    def refuse_encoding_name(cls, files: TokenizerFiles, tiktoken_name: str | None) -> None:
        """Refuse a tiktoken encoding name for a file of a kind that has none."""
        if tiktoken_name is not None:
            raise TokenizerFileError(f"{files.shown}: a {cls.kind} file, not a tiktoken ranks file: "
                                     f"--tiktoken_encoding {tiktoken_name} does not apply")

    def check_strings(self) -> Sequence[str]:
        """The strings the self-check puts in text, where they must stay text: by default the special tokens."""
        return list(self.special_tokens)

    def engine_problems(self, backend: str) -> list[str]:
        """What the engine `backend` is known to get wrong for this file, before it is loaded (by default, nothing)."""
        return []

    def gigatoken_json(self) -> str:
        """The tokenizer.json gigatoken loads for this file, its special tokens as text."""
        raise ValueError(f"a {self.kind} tokenizer has no tokenizer.json for gigatoken")

    def single_thread(self) -> None:  # noqa: B027 -- most kinds' references use the calling thread already
        """Keep the reference's batches on the calling thread (a worker process that owns one core)."""

    def manifest_facts(self) -> dict | None:
        """The manifest's description of the tokenizer beyond the ids: by default `to_json`."""
        return self.to_json()

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

    def byte_pieces(self) -> np.ndarray:
        """Per id, whether it stands for one byte the vocabulary does not cover (a byte-fallback piece)."""
        return np.zeros(self.vocab_size, dtype=bool)

    def piece_cut_problems(self) -> list[str]:
        """Why this tokenizer's structure does not allow cutting long texts (kinds/byte_level.py's rules)."""
        return ["no rule for cutting this kind of tokenizer"]

    def special_ids(self, *, add_bos: bool, add_eos: bool, bos_id: int | None = None, eos_id: int | None = None,
                    pad_id: int | None = None, allow_text: bool = False) -> SpecialIds:
        """The document-boundary policy applied to this tokenizer's ids.

        Overrides (flags) win over the tokenizer's own ids; a policy that needs an id the tokenizer lacks,
        an id outside the vocabulary, or (without `allow_text`) a boundary id that is an ordinary token
        is a ValueError naming the flag and where the ids were looked for.
        """
        if not (add_bos or add_eos):
            raise ValueError("Documents need a boundary token: with neither EOS nor BOS, packed documents would run "
                             "into each other. Keep the default EOS or pass --add_bos.")
        chosen = {}
        for role, wanted, value in (("bos", add_bos, bos_id), ("eos", add_eos, eos_id), ("pad", False, pad_id)):
            own = getattr(self, f"{role}_id")
            chosen[role] = own if value is None else value
            flag = f"--{role}_id"
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{flag}={value} is outside the vocabulary of {self.path} (size {self.vocab_size})")
            if wanted and chosen[role] < 0:
                looked = self.specials_looked_for.format(role=role)
                raise ValueError(f"The tokenizer {self.path} ({self.kind}) has no {role.upper()} id (looked for "
                                 f"{looked}) and the pipeline is asked to add {role.upper()}: pass {flag} N (an id "
                                 f"below {self.vocab_size}; an ordinary token's with --allow_text_eos) or turn "
                                 f"{role.upper()} off.")
        if not allow_text:
            self.refuse_text_boundaries(add_bos=add_bos, add_eos=add_eos, bos_id=bos_id, eos_id=eos_id)
        return SpecialIds(self.vocab_size, chosen["bos"], chosen["eos"], chosen["pad"], self.unk_id, add_bos, add_eos)

    def refuse_text_boundaries(self, *, add_bos: bool, add_eos: bool, bos_id: int | None,
                               eos_id: int | None) -> None:
        """Refuse a --bos_id/--eos_id of an added boundary that names an ordinary token of the vocabulary.

        Text produces ordinary tokens, so such a boundary would be indistinguishable from text. The
        tokenizer's own id for the role and its special/control tokens (`special_tokens`) are boundaries.
        """
        own = {"bos": self.bos_id, "eos": self.eos_id}
        for role, value in (("bos", bos_id if add_bos else None), ("eos", eos_id if add_eos else None)):
            if value is None or value == own[role] or value in self.special_tokens.values():
                continue
            try:
                token = self.shown_token(value)
            except Exception:  # noqa: BLE001 -- the message only: any library's failure to show a token
                token = "?"
            raise ValueError(f"--{role}_id {value}: {token!r} is an ordinary token of {self.path}, which text "
                             f"produces too: its {role.upper()} would be indistinguishable from text. Name a special "
                             f"(control) token, or pass --allow_text_eos to use it anyway")

    def shown_token(self, token_id: int) -> str:
        """One token as an error message shows it."""
        return self.decode([token_id])

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


# Texts a kind's cuts are self-tested on, cut at every candidate place (short: it runs on every worker).
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


class CutRules(abc.ABC):
    """Where a kind's very long texts may be cut: pieces encoded alone must give the whole text's ids.

    Two kinds of cut, each allowed and self-tested on its own (pipeline/tokenize/pieces.py): after a
    newline ("newlines") and at a space ("spaces"). A piece that starts after a newline cut is
    encoded after `context` (its left context in the text), whose tokens are then dropped.
    """

    context: str = ""
    self_test_texts: tuple[str, ...] = SELF_TEST_TEXTS  # each, cut anywhere, must keep its whole-text ids

    @abc.abstractmethod
    def allowed(self, tokenizer: Tokenizer) -> tuple[bool, bool, list[str]]:
        """(newline cuts, space cuts, why not) from the tokenizer's structure and vocabulary."""

    @abc.abstractmethod
    def cut_points(self, text: str, piece_chars: int, *, newlines: bool, spaces: bool) -> list:
        """Where to cut `text` into pieces of about `piece_chars`, in this kind's form."""

    @abc.abstractmethod
    def pieces(self, text: str, cuts: list) -> list[tuple[str, bool]]:
        """(piece, whether it is encoded after `context`) of `text` cut at `cuts`."""

    @abc.abstractmethod
    def identity(self, tokenizer: Tokenizer) -> Hashable:
        """What decides whether cuts keep the ids, besides the engine (two equal identities: the same answer)."""
