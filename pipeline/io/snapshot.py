"""What each input was when the job started, and a check that it is still that when it has been read.

A file that changes while the job reads it (truncated, appended to, replaced) would otherwise give
a partial or mixed output and exit 0. `take_snapshots` records, at launch, each input's size and
modification time (and inode) on a local disk, or its size, ETag, generation and modification time
on an object store; `unchanged` wraps the reading of a file (or a piece of it) and fails the job,
naming the file, when the file differs from its snapshot before its first chunk or after its last.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Iterator

import fsspec

from pipeline.core.errors import JobError
from pipeline.io.decompress import CorruptInputError
from pipeline.io.urls import fs_path, is_local_url, redact_url

# What object stores report that changes with the content: s3 (ETag, LastModified), GCS
# (generation, updated, md5Hash), Azure (etag, last_modified), http (ETag, size).
_REMOTE_KEYS = ("size", "ETag", "etag", "generation", "md5Hash", "LastModified", "last_modified", "updated", "mtime")


class InputChangedError(JobError):
    """An input changed while the job read it: the output would be a partial or mixed snapshot."""


def snapshot(url: str) -> tuple:
    """What identifies this version of the file: (size, mtime in ns, inode) locally, or the store's fields."""
    if is_local_url(url):
        info = os.stat(fs_path(url))
        return ("local", info.st_size, info.st_mtime_ns, info.st_ino)
    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache(path)
    info = fs.info(path)
    return ("remote", *(str(info.get(key)) for key in _REMOTE_KEYS))


def take_snapshots(urls: list[str]) -> tuple[tuple[str, tuple], ...]:
    """(url, snapshot) of every input, taken at launch (a few at once on object stores)."""
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        return tuple(zip(urls, pool.map(snapshot, urls), strict=True))


def describe_change(before: tuple, now: tuple) -> str:
    """How a file's snapshot changed, in a few words ("its size went from 10 to 12 bytes")."""
    if now == ("gone",):
        return "it was removed"
    return _describe(before, now)


def _describe(before: tuple, now: tuple) -> str:
    if before[0] == "local" and now[0] == "local":
        if now[1] != before[1]:
            return f"its size went from {before[1]:,} to {now[1]:,} bytes"
        if now[3] != before[3]:
            return "it was replaced by another file"
        return "it was modified (its modification time changed)"
    return "its size, ETag or modification time changed"


def check_unchanged(url: str, expected: tuple) -> None:
    """Raise InputChangedError when `url` is no longer what `expected` recorded."""
    try:
        now = snapshot(url)
    except FileNotFoundError:
        now = ("gone",)
    if now != expected:
        why = "it was removed" if now == ("gone",) else _describe(expected, now)
        raise InputChangedError(
            f"{redact_url(url)} changed while the job read it ({why}): the output would mix versions of it. "
            "Run the job again once the inputs stay as they are"
        )


def unchanged(chunks: Iterator, url: str, expected: tuple | None) -> Iterator:
    """The chunks of `url`, checked against its snapshot before the first and after the last.

    A damaged file that also changed is reported as changed (its damage is the change's).
    """
    if expected is None:
        yield from chunks
        return
    check_unchanged(url, expected)
    try:
        yield from chunks
    except CorruptInputError:
        check_unchanged(url, expected)
        raise
    check_unchanged(url, expected)
