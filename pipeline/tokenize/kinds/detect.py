"""Which kind a tokenizer file is, from its bytes, and the `Tokenizer` loaded from it: every kind of the registry asked.

    a SentencePiece .model                  a serialized ModelProto           -> SentencePieceTokenizer
    a Hugging Face tokenizer.json           JSON with a model and its pipeline -> HuggingFaceTokenizer
      or a directory holding one (with tokenizer_config.json / special_tokens_map.json beside it)
    a tiktoken BPE ranks file               `base64 rank` lines                -> TiktokenTokenizer
      (its pattern and special tokens from <file>.json or a built-in name)

The extension says nothing (Llama 3's tiktoken file is called `tokenizer.model`): each kind's
`looks_like` looks at the bytes; a directory is a tokenizer when it holds a kind's `directory_file`.
Anything else is `UnknownTokenizerKind`, one line naming the file. Locations are local paths or
fsspec URLs; what errors and the manifest show of them is redacted (no credentials).
"""

from __future__ import annotations

import posixpath

import fsspec

from pipeline.io.files import NotAFileError, read_bytes
from pipeline.io.urls import redact_url
from pipeline.tokenize.kinds.base import (
    Tokenizer,
    TokenizerFileError,
    TokenizerFileMissing,
    TokenizerFiles,
    UnknownTokenizerKind,
    json_object,
)
from pipeline.tokenize.kinds.registry import KINDS


def _read(url: str) -> bytes | None:
    """A file's bytes, or None when it does not exist; only a regular file of at most MAX_READ_BYTES is read."""
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path) or fs.isdir(path):
        return None
    try:
        return read_bytes(url)
    except NotAFileError as e:  # a FIFO would hang, /dev/zero fill memory
        raise TokenizerFileError(f"{redact_url(url)}: {e}") from None


def is_dir(url: str) -> bool:
    """Whether `url` is a directory (a Hugging Face one holds tokenizer.json)."""
    fs, path = fsspec.core.url_to_fs(url)
    return fs.isdir(path)


def _expected() -> str:
    """The kinds, as a message lists them: "a, b or c"."""
    described = [kind.described for kind in KINDS.values()]
    return ", ".join(described[:-1]) + " or " + described[-1] if len(described) > 1 else described[0]


def _directory_files() -> list[str]:
    return [kind.directory_file for kind in KINDS.values() if kind.directory_file]


def kind_of(path: str, data: bytes) -> str:
    """The kind of a file's bytes; UnknownTokenizerKind (naming `path`) when none fits."""
    parsed = json_object(data, path)
    for kind in KINDS.values():
        if kind.looks_like(data, parsed):
            return kind.kind
    if parsed is not None:
        named = " or ".join(f"the {name}" for name in _directory_files())
        raise UnknownTokenizerKind(f"{path}: JSON but not a tokenizer file of a known kind (pass {named}, or the "
                                   f"directory that holds it); expected {_expected()}")
    raise UnknownTokenizerKind(f"{path}: not a tokenizer file of a known kind; expected {_expected()}")


def _main_file(path: str) -> tuple[str, bytes]:
    """(the main file's location, its bytes): the file itself, or the file a kind names in a directory."""
    shown = redact_url(path)
    if is_dir(path):
        for name in _directory_files():
            main = posixpath.join(path.rstrip("/"), name)
            data = _read(main)
            if data is not None:
                return main, data
        raise UnknownTokenizerKind(f"{shown}: a directory without {' or '.join(_directory_files())}; "
                                   f"expected {_expected()}")
    data = _read(path)
    if data is None:
        raise TokenizerFileMissing(f"{shown}: no such tokenizer file")
    return path, data


def detect_kind(path: str) -> str:
    """The kind of the tokenizer at `path` (a file or a directory holding one)."""
    main, data = _main_file(path)
    return kind_of(redact_url(main), data)


def load_tokenizer(path: str, *, tiktoken_name: str | None = None, expected_sha256: str | None = None) -> Tokenizer:
    """The tokenizer at `path`, of whatever kind it is.

    `tiktoken_name`: a built-in pattern and special tokens for a ranks file (tiktoken_bpe.BUILTINS),
    instead of the `<file>.json` beside it. `expected_sha256`: refuse a main file whose sha256 differs
    (a worker loading what the driver checked). A missing file is `TokenizerFileMissing`, also a
    FileNotFoundError.
    """
    main, data = _main_file(path)
    kind = KINDS[kind_of(redact_url(main), data)]
    tokenizer = kind.load(TokenizerFiles(redact_url(path), main, data, _read), tiktoken_name=tiktoken_name)
    if expected_sha256 is not None and tokenizer.sha256 != expected_sha256:
        raise TokenizerFileError(f"{tokenizer.path}: sha256 {tokenizer.sha256} differs from the checked "
                                 f"{expected_sha256}: the tokenizer changed while the job ran")
    return tokenizer
