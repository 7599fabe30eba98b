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

`create_only=True` (the manifest) never replaces a file: locally the complete temporary file is
hard-linked to the final name (`link` fails if the name exists, atomically, on local disks and on
NFS), on S3 the PUT carries `If-None-Match: *`. Either way a FileExistsError says another writer
was first. Elsewhere (gs://, az://) the check comes before the write and is not atomic.

A failed write (a full disk, no permission) is an OutputWriteError naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import queue
import re
import tempfile
import threading
import uuid
from collections.abc import Iterable

import fsspec

from pipeline.core.errors import JobError
from pipeline.io.urls import is_local, is_object_store, protocols, redact_url

# The hidden temporary names `publish` (and the spill directory) use.
TEMP_NAME = re.compile(r"^\..*\.tmp-[0-9a-f]{32}$")
WRITE_BEHIND = 2  # parts made and not yet written, with `parts_kept`


def temp_name(name: str) -> str:
    """A new hidden temporary name for `name` (a basename)."""
    return f".{name}.tmp-{uuid.uuid4().hex}"


class OutputWriteError(JobError, OSError):
    """A file of the output (or a temporary file for it) cannot be written: disk full, permissions."""


def write_failure(path: str, error: OSError) -> OutputWriteError:
    """The one-line error for a failed write of `path`."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += " (the disk is full)"
    return OutputWriteError(f"cannot write {redact_url(path)}: {reason}")


def _write_local(path: str, parts: Iterable[bytes], shown: str | None = None, sync: bool = True,
                 parts_kept: bool = False) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "wb") as f:
            if parts_kept:
                size = _write_behind(f, digest, parts)
            else:
                for part in parts:
                    f.write(part)
                    digest.update(part)
                    size += len(part)
            if sync:
                f.flush()
                os.fsync(f.fileno())
    except OutputWriteError:
        raise
    except OSError as e:
        raise write_failure(shown or path, e) from e
    return size, digest.hexdigest()


def _write_behind(f, digest, parts: Iterable[bytes]) -> int:
    """Write and hash each part in a thread of its own while the next one is made; the bytes written.

    Both the write and sha256 release the GIL, so a shard's last step (gathering its records, then
    hashing and writing them) uses two cores instead of one. At most WRITE_BEHIND parts wait.
    """
    waiting: queue.Queue = queue.Queue(maxsize=WRITE_BEHIND)
    failed: list[BaseException] = []

    def drain() -> None:
        while (part := waiting.get()) is not None:
            if failed:
                continue  # the producer finds the failure at its next part; nothing more is written
            try:
                f.write(part)
                digest.update(part)
            except BaseException as e:  # noqa: BLE001 -- handed to the producer's thread, raised there
                failed.append(e)

    writer = threading.Thread(target=drain, name="publish-write-behind", daemon=True)
    writer.start()
    size = 0
    try:
        for part in parts:
            if failed:
                break
            waiting.put(part)
            size += len(part)
    finally:
        waiting.put(None)
        writer.join()
    if failed:
        raise failed[0]
    return size


def _link_new(tmp: str, final: str) -> None:
    """Give the complete file `tmp` the name `final` unless that name exists (FileExistsError)."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, f"{final} exists", final) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise write_failure(final, e) from e
        # No hard links here (some FUSE filesystems): check, then rename. The output lock
        # (pipeline/io/lock.py) already keeps other runs out of a local output.
        if os.path.lexists(final):
            raise FileExistsError(errno.EEXIST, f"{final} exists", final) from None
        os.replace(tmp, final)


def _upload(fs, local: str, final: str, path: str, create_only: bool) -> None:
    if {"s3", "s3a"}.intersection(protocols(fs)):
        fs.put_file(local, final, mode="create" if create_only else "overwrite")
    elif create_only and fs.exists(final):
        raise FileExistsError(errno.EEXIST, f"{redact_url(path)} exists", redact_url(path))
    elif is_object_store(fs):
        fs.put_file(local, final)
    else:
        parent = posixpath.dirname(final)
        fs.makedirs(parent, exist_ok=True)
        tmp = posixpath.join(parent, temp_name(posixpath.basename(final)))
        fs.put_file(local, tmp)
        fs.mv(tmp, final)


def publish(path: str, parts: Iterable[bytes], create_only: bool = False, parts_kept: bool = False) -> tuple[int, str]:
    """Write `parts` (bytes-like, iterated once) back to back as the file `path`; returns (bytes, sha256).

    `parts_kept`: each part stays valid after the next is taken (a buffer of its own, not one an
    iterator refills), so the parts are written while the next ones are made (`_write_behind`).

    Raises:
        FileExistsError: `create_only` and the file exists.
        OutputWriteError: the file (or its temporary file) cannot be written.
    """
    fs, final = fsspec.core.url_to_fs(path)
    parent = posixpath.dirname(final)
    if is_local(fs):
        try:
            os.makedirs(parent or ".", exist_ok=True)
        except OSError as e:
            raise write_failure(parent, e) from e
        tmp = posixpath.join(parent, temp_name(posixpath.basename(final)))
        try:
            size, sha = _write_local(tmp, parts, shown=final, parts_kept=parts_kept)
            # The sha256 is of the bytes as written; re-reading the file to hash it again would read
            # the whole output back (600 GB for the Pile, hours on EFS): the size check is the cheap one.
            if os.path.getsize(tmp) != size:
                raise OSError(f"verification of {tmp} failed after writing: {os.path.getsize(tmp)} bytes, "
                              f"{size} written")
            if create_only:
                _link_new(tmp, final)
            else:
                os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return size, sha
    with tempfile.TemporaryDirectory(prefix="pile-pipeline-publish-") as local_dir:
        local = os.path.join(local_dir, "part")
        # No fsync: this copy only feeds the upload, and a VM's disk can be far slower than its page cache.
        size, sha = _write_local(local, parts, sync=False, parts_kept=parts_kept)
        try:
            _upload(fs, local, final, path, create_only)
        except (FileExistsError, OutputWriteError):
            raise
        except OSError as e:
            raise write_failure(path, e) from e
    fs.invalidate_cache(parent)
    try:
        uploaded = fs.size(final)
    except FileNotFoundError:
        uploaded = None
    if uploaded != size:
        raise OutputWriteError(f"{redact_url(path)}: {'removed' if uploaded is None else 'replaced'} right after it "
                               "was uploaded (by another run with --overwrite?)")
    return size, sha


def create_object(url: str, text: str) -> bool:
    """Write a small object on an object store unless it exists; whether it was written.

    On S3 the PUT carries `If-None-Match: *` (atomic); elsewhere the check comes first.
    """
    fs, path = fsspec.core.url_to_fs(url)
    data = text.encode("utf-8")
    try:
        if {"s3", "s3a"}.intersection(protocols(fs)):
            fs.pipe_file(path, data, mode="create")
            return True
        if fs.exists(path):
            return False
        fs.pipe_file(path, data)
        return True
    except FileExistsError:
        return False


def publish_text(path: str, text: str, create_only: bool = False) -> tuple[int, str]:
    """`publish` one UTF-8 text."""
    return publish(path, [text.encode("utf-8")], create_only)


def publish_copy(local_path: str, dest: str) -> tuple[int, str]:
    """`publish` a copy of a local file at `dest` (local path or URL)."""

    def blocks():
        with open(local_path, "rb") as f:
            while block := f.read(4 << 20):
                yield block

    return publish(dest, blocks())


def publish_link(path: str, target: str) -> None:
    """Point the symbolic link `path` (a local path) at `target`, replacing an old link atomically.

    The new link is made under a temporary name and renamed over the old one: a reader resolving
    `path` meanwhile finds the old target or the new one, never no link.
    """
    tmp = os.path.join(os.path.dirname(path), temp_name(os.path.basename(path)))
    try:
        os.symlink(target, tmp)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise write_failure(path, e) from e
