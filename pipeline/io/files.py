"""Whole-file reads and digests of local files and fsspec URLs, streamed, of regular files only.

What is read whole (a tokenizer model, a manifest, a lock) is bounded: a path to `/dev/zero`, a
FIFO or a folder is refused before anything is read, and a file larger than the bound is refused
instead of filling memory.
"""

from __future__ import annotations

import os
import stat

import fsspec

from pipeline.core.hashing import sha256_stream
from pipeline.io.urls import fs_path, is_local_url

MAX_READ_BYTES = 256 << 20  # a whole-file read: the largest SentencePiece models are tens of MB


class NotAFileError(ValueError):
    """A location that is not a regular file (a folder, a device, a FIFO, an empty path) or is too large."""


def check_regular_file(url: str) -> int | None:
    """The size of a regular file (None where the store does not say); NotAFileError otherwise.

    A missing file is a FileNotFoundError.
    """
    if not url.strip():
        raise NotAFileError("the path is empty")
    if is_local_url(url):
        info = os.stat(fs_path(url))
        if stat.S_ISDIR(info.st_mode):
            raise NotAFileError("is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise NotAFileError("is not a regular file (a device, a FIFO or a socket)")
        return info.st_size
    fs, path = fsspec.core.url_to_fs(url)
    info = fs.info(path)
    if info.get("type") == "directory":
        raise NotAFileError("is a folder, not a file")
    return info.get("size")


def read_bytes(url: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
    """The whole content of a small regular file: a tokenizer model, a manifest, a lock.

    Raises NotAFileError for anything but a regular file of at most `max_bytes`, or one that cannot
    be read (`/proc/self/mem` is a regular file that refuses reads); FileNotFoundError when there is none.
    """
    size = check_regular_file(url)
    if size is not None and size > max_bytes:
        raise NotAFileError(f"is {size:,} bytes, more than the {max_bytes:,} read whole")
    try:
        with fsspec.open(url, "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise NotAFileError(f"cannot be read ({e.strerror or e})") from None
    if len(data) > max_bytes:
        raise NotAFileError(f"holds more than the {max_bytes:,} bytes read whole")
    return data


def sha256_of(url: str) -> str:
    """sha256 of a local regular file or fsspec URL, streamed (NotAFileError for anything else)."""
    check_regular_file(url)
    with fsspec.open(url, "rb") as f:
        return sha256_stream(f)
