"""Whole-file reads and digests of local files and fsspec URLs, streamed."""

from __future__ import annotations

import fsspec

from pipeline.core.hashing import sha256_stream


def read_bytes(url: str) -> bytes:
    """The whole content of a (small) file: a tokenizer model, a config."""
    with fsspec.open(url, "rb") as f:
        return f.read()


def sha256_of(url: str) -> str:
    """sha256 of a local file or fsspec URL, streamed."""
    with fsspec.open(url, "rb") as f:
        return sha256_stream(f)
