"""Which kind a tokenizer file is, from its bytes, and the `Tokenizer` loaded from it.

    a SentencePiece .model                  a serialized ModelProto           -> SentencePieceTokenizer
    a Hugging Face tokenizer.json           JSON with a model and its pipeline -> HuggingFaceTokenizer
      or a directory holding one (with tokenizer_config.json / special_tokens_map.json beside it)
    a tiktoken BPE ranks file               `base64 rank` lines                -> TiktokenTokenizer
      (its pattern and special tokens from <file>.json or a built-in name)

The extension says nothing (Llama 3's tiktoken file is called `tokenizer.model`). Anything else is
`UnknownTokenizerKind`, one line naming the file. Locations are local paths or fsspec URLs; what
errors and the manifest show of them is redacted (no credentials).
"""

from __future__ import annotations

import json
import posixpath

import fsspec

from pipeline.io.files import NotAFileError, read_bytes
from pipeline.io.urls import redact_url
from pipeline.tokenize.kinds import hf_json, sp_model, tiktoken_bpe
from pipeline.tokenize.kinds.base import (
    HUGGINGFACE,
    SENTENCEPIECE,
    TIKTOKEN,
    Tokenizer,
    TokenizerFileError,
    UnknownTokenizerKind,
)

_KNOWN = ("a SentencePiece .model, a Hugging Face tokenizer.json (or a directory holding one) or a tiktoken "
          "BPE ranks file")


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


def _json(data: bytes, path: str):
    text = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
    except RecursionError:
        raise TokenizerFileError(f"{path}: JSON nested too deeply to be a tokenizer file") from None


def kind_of(path: str, data: bytes) -> str:
    """The kind of a file's bytes; UnknownTokenizerKind (naming `path`) when none fits."""
    spec = _json(data, path)
    if spec is not None:
        if hf_json.looks_like(spec):
            return HUGGINGFACE
        raise UnknownTokenizerKind(f"{path}: JSON but not a Hugging Face tokenizer.json (pass the tokenizer.json, "
                                   f"or the directory that holds it); expected {_KNOWN}")
    if tiktoken_bpe.looks_like(data):
        return TIKTOKEN
    if sp_model.looks_like(data):
        return SENTENCEPIECE
    raise UnknownTokenizerKind(f"{path}: not a tokenizer file of a known kind; expected {_KNOWN}")


def detect_kind(path: str) -> str:
    """The kind of the tokenizer at `path` (a file or a Hugging Face directory)."""
    shown = redact_url(path)
    if is_dir(path):
        if _read(posixpath.join(path.rstrip("/"), hf_json.TOKENIZER_JSON)) is None:
            raise UnknownTokenizerKind(f"{shown}: a directory without {hf_json.TOKENIZER_JSON}; expected {_KNOWN}")
        return HUGGINGFACE
    data = _read(path)
    if data is None:
        raise TokenizerFileError(f"{shown}: no such tokenizer file")
    return kind_of(shown, data)


def load_tokenizer(path: str, *, tiktoken_name: str | None = None, expected_sha256: str | None = None) -> Tokenizer:
    """The tokenizer at `path`, of whatever kind it is.

    `tiktoken_name`: a built-in pattern and special tokens for a ranks file (tiktoken_bpe.BUILTINS),
    instead of the `<file>.json` beside it. `expected_sha256`: refuse a main file whose sha256 differs
    (a worker loading what the driver checked).
    """
    shown = redact_url(path)
    directory = None
    if is_dir(path):
        directory = path.rstrip("/")
        main = posixpath.join(directory, hf_json.TOKENIZER_JSON)
    else:
        main = path
    data = _read(main)
    if data is None:
        if directory is not None:
            raise UnknownTokenizerKind(f"{shown}: a directory without {hf_json.TOKENIZER_JSON}; expected {_KNOWN}")
        raise TokenizerFileError(f"{shown}: no such tokenizer file")
    kind = kind_of(redact_url(main), data)
    if tiktoken_name is not None and kind != TIKTOKEN:
        raise TokenizerFileError(f"{shown}: a {kind} file, not a tiktoken ranks file: a tiktoken encoding name "
                                 f"({tiktoken_name!r}) does not apply")
    if kind == HUGGINGFACE:
        base = directory or posixpath.dirname(main)
        companions = {}
        for name in hf_json.COMPANIONS:
            raw = _read(posixpath.join(base, name)) if base else _read(name)
            if raw is not None:
                companions[name] = raw
        tokenizer: Tokenizer = hf_json.HuggingFaceTokenizer(shown, data, companions)
    elif kind == TIKTOKEN:
        spec_bytes = _read(tiktoken_bpe.spec_path(main))
        spec = None
        if spec_bytes is not None:
            spec = _json(spec_bytes, tiktoken_bpe.spec_path(redact_url(main)))
            if not isinstance(spec, dict):
                raise TokenizerFileError(f"{tiktoken_bpe.spec_path(redact_url(main))}: not a JSON object")
        tokenizer = tiktoken_bpe.TiktokenTokenizer(shown, data, name=tiktoken_name, spec=spec, spec_bytes=spec_bytes)
    else:
        tokenizer = sp_model.SentencePieceTokenizer(shown, data)
    if expected_sha256 is not None and tokenizer.sha256 != expected_sha256:
        raise TokenizerFileError(f"{shown}: sha256 {tokenizer.sha256} differs from the checked {expected_sha256}: "
                                 "the tokenizer changed while the job ran")
    return tokenizer
