"""Publish a file complete or not at all, on a local disk, EFS/NFS or an object store (s3://, gs://).

Every file the pipeline writes (shards, dead letters, the manifest, a tokenizer's files) goes
through `publish`:

- **Local disks and EFS/NFS**: the bytes go to a hidden temporary name *in the final directory*
  (`.NAME.tmp-<uuid>`, so the rename never crosses filesystems), hashed (sha256) as they are
  written, flushed with fsync, checked (size), then renamed. A rename within one directory is
  atomic on the NFS server: a reader on any host finds no file or the complete file.
- **Object stores**: the bytes go to a local temporary file, then up in one PUT (a multipart upload
  for large files), which makes the object appear only when complete. There is no rename on an
  object store (s3fs's mv is copy + delete, which could expose a partial object), so none is used.
- **Other fsspec filesystems**: a temporary name in the final directory, then the filesystem's move.

Each call has its own temporary name, so two attempts at the same file (a retried bundle while
the first attempt still runs) never mix bytes; both write the same bytes and the last rename wins.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import tempfile
import uuid
from collections.abc import Iterable

import fsspec

from pipeline.io.urls import is_local, is_object_store, redact_url

# The hidden temporary names `publish` (and the spill directory) use.
TEMP_NAME = re.compile(r"^\..*\.tmp-[0-9a-f]{32}$")


def temp_name(name: str) -> str:
    """A new hidden temporary name for `name` (a basename)."""
    return f".{name}.tmp-{uuid.uuid4().hex}"


def _write_local(path: str, parts: Iterable[bytes], sync: bool = True) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "wb") as f:
        for part in parts:
            f.write(part)
            digest.update(part)
            size += len(part)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    return size, digest.hexdigest()


def publish(path: str, parts: Iterable[bytes]) -> tuple[int, str]:
    """Write `parts` (bytes-like, iterated once) back to back as the file `path`; returns (bytes, sha256)."""
    fs, final = fsspec.core.url_to_fs(path)
    parent = posixpath.dirname(final)
    if is_local(fs):
        os.makedirs(parent or ".", exist_ok=True)
        tmp = posixpath.join(parent, temp_name(posixpath.basename(final)))
        try:
            size, sha = _write_local(tmp, parts)
            # The sha256 is of the bytes as written; re-reading the file to hash it again would read
            # the whole output back (600 GB for the Pile, hours on EFS): the size check is the cheap one.
            if os.path.getsize(tmp) != size:
                raise OSError(f"verification of {tmp} failed after writing: {os.path.getsize(tmp)} bytes, "
                              f"{size} written")
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return size, sha
    with tempfile.TemporaryDirectory(prefix="pile-pipeline-publish-") as local_dir:
        local = os.path.join(local_dir, "part")
        # No fsync: this copy only feeds the upload, and a VM's disk can be far slower than its page cache.
        size, sha = _write_local(local, parts, sync=False)
        if is_object_store(fs):
            fs.put_file(local, final)
        else:
            fs.makedirs(parent, exist_ok=True)
            tmp = posixpath.join(parent, temp_name(posixpath.basename(final)))
            fs.put_file(local, tmp)
            fs.mv(tmp, final)
    if fs.size(final) != size:
        raise OSError(f"upload of {redact_url(path)} is incomplete")
    return size, sha


def publish_text(path: str, text: str) -> tuple[int, str]:
    """`publish` one UTF-8 text."""
    return publish(path, [text.encode("utf-8")])


def publish_copy(local_path: str, dest: str) -> tuple[int, str]:
    """`publish` a copy of a local file at `dest` (local path or URL)."""

    def blocks():
        with open(local_path, "rb") as f:
            while block := f.read(4 << 20):
                yield block

    return publish(dest, blocks())
