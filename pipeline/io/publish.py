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
import fcntl
import hashlib
import mmap
import os
import posixpath
import queue
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable

import fsspec
import numpy as np

from pipeline.core.errors import JobError
from pipeline.io import localfs
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


class _NoDigest:
    """Stands for sha256 where the caller does not want it (`publish(..., sha256=False)`)."""

    def update(self, part) -> None:
        pass

    def hexdigest(self) -> str:
        return ""


def _write_local(path: str, parts: Iterable[bytes], shown: str | None = None, sync: bool = True,
                 parts_kept: bool = False, release: Callable | None = None, direct_io: bool = False,
                 sha256: bool = True) -> tuple[int, str]:
    digest = hashlib.sha256() if sha256 else _NoDigest()
    size = 0
    try:
        fd = localfs.open_direct(path) if direct_io and parts_kept and sync else None
        with _DirectFile(fd) if fd is not None else open(path, "wb") as f:
            if parts_kept:
                size = _write_behind(f, digest, parts, release)
            else:
                for part in parts:
                    f.write(part)
                    digest.update(part)
                    size += len(part)
                    if release is not None:
                        release(part)
            if isinstance(f, _DirectFile):
                f.finish(size)
            if sync:
                f.flush()
                os.fsync(f.fileno())
    except OutputWriteError:
        raise
    except OSError as e:
        raise write_failure(shown or path, e) from e
    return size, digest.hexdigest()


def _write_behind(f, digest, parts: Iterable[bytes], release: Callable | None = None) -> int:
    """Write each part in one thread and hash it in another while the next one is made; the bytes written.

    The write, sha256 and numpy's gathering all release the GIL, so a shard's last step (gathering its
    records, hashing and writing them) runs on every core there is. At most WRITE_BEHIND parts wait.
    `release(part)` once both threads are done with a part (or skip it after a failure).
    """
    failed: list[BaseException] = []
    lock = threading.Lock()

    def drain(waiting: queue.Queue, use) -> None:
        while (item := waiting.get()) is not None:
            part = item[0]
            if not failed:  # after a failure the producer stops at its next part; nothing more is written
                try:
                    use(part)
                except BaseException as e:  # noqa: BLE001 -- handed to the producer's thread, raised there
                    failed.append(e)
            if release is not None:
                with lock:
                    item[1] -= 1
                    done = item[1] == 0
                if done:
                    release(part)

    queues = [queue.Queue(maxsize=WRITE_BEHIND) for _ in range(2)]
    threads = [threading.Thread(target=drain, args=(q, use), name="publish-write-behind", daemon=True)
               for q, use in zip(queues, (f.write, digest.update), strict=True)]
    for thread in threads:
        thread.start()
    size = 0
    try:
        for part in parts:
            if failed:
                break
            item = [part, len(queues)]  # the part and how many threads still use it
            for q in queues:
                q.put(item)
            size += len(part)
    finally:
        for q in queues:
            q.put(None)
        for thread in threads:
            thread.join()
    if failed:
        raise failed[0]
    return size


class _DirectFile:
    """A file written with direct I/O (`localfs.open_direct`) through an aligned staging buffer.

    Direct writes need aligned buffers, offsets and lengths: parts are copied into a page-aligned
    buffer written whole; `finish` writes the last block zero-padded and cuts the file to its size.
    Should the disk refuse an aligned direct write after all, the file goes on through the page cache.
    """

    STAGE_BYTES = 8 << 20

    def __init__(self, fd: int):
        self._fd = fd
        try:
            self._stage = mmap.mmap(-1, self.STAGE_BYTES)  # anonymous maps are page-aligned
        except OSError:
            os.close(fd)
            raise
        self._buffer = np.frombuffer(self._stage, np.uint8)
        self._filled = 0

    def fileno(self) -> int:
        return self._fd

    def write(self, part) -> None:
        data = np.frombuffer(part, np.uint8)
        while len(data):
            n = min(len(data), self.STAGE_BYTES - self._filled)
            self._buffer[self._filled : self._filled + n] = data[:n]  # numpy's copy releases the GIL
            self._filled += n
            data = data[n:]
            if self._filled == self.STAGE_BYTES:
                self._write_stage(self.STAGE_BYTES)

    def _write_stage(self, length: int) -> None:
        view = memoryview(self._stage)[:length]
        while len(view):
            try:
                view = view[os.write(self._fd, view):]
            except OSError as e:
                if e.errno != errno.EINVAL or not self._direct():
                    raise
                fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self._filled = 0

    def _direct(self) -> bool:
        return bool(fcntl.fcntl(self._fd, fcntl.F_GETFL) & os.O_DIRECT)

    def finish(self, size: int) -> None:
        """Write what is left (its last block zero-padded) and cut the file to `size` bytes."""
        padded = -(-self._filled // localfs.DIRECT_ALIGN) * localfs.DIRECT_ALIGN
        self._buffer[self._filled : padded] = 0
        self._write_stage(padded)
        os.ftruncate(self._fd, size)

    def flush(self) -> None:
        pass  # nothing is held back: `finish` wrote the rest

    def __enter__(self) -> _DirectFile:
        return self

    def __exit__(self, *exc) -> None:
        self._buffer = None
        try:
            # A failed write's traceback may still hold a view of the buffer: it is then freed with it.
            with contextlib.suppress(BufferError):
                self._stage.close()
        finally:
            os.close(self._fd)


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


def publish(path: str, parts: Iterable[bytes], create_only: bool = False, parts_kept: bool = False,
            release: Callable | None = None, direct_io: bool = False, sync: bool = True,
            sha256: bool = True) -> tuple[int, str]:
    """Write `parts` (bytes-like, iterated once) back to back as the file `path`; returns (bytes, sha256).

    `parts_kept`: each part stays valid after the next is taken (a buffer of its own, not one an
    iterator refills), so the parts are written while the next ones are made (`_write_behind`).
    `release(part)`: called once nothing here reads the part any more (written and hashed), so that
    its maker may refill the buffer; parts not released yet are never touched by their maker.
    `direct_io` (with `parts_kept`): a local file is written by direct I/O where its disk allows it
    (`localfs.open_direct`), for a large file written once and read elsewhere, whose pages would
    only evict others' from the page cache; the caller's choice (a runner's sink). `sync=False`: a
    local file is renamed without waiting for the disk (fsync): complete or absent for every
    process, but a machine that loses power may keep a file cut short under its final name (for
    files whose reader checks them, pipeline/io/workfolder.py). `sha256=False`: no digest (its
    place in the result is ""), for files checked otherwise.

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
            size, sha = _write_local(tmp, parts, shown=final, sync=sync, parts_kept=parts_kept, release=release,
                                     direct_io=direct_io, sha256=sha256)
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
        size, sha = _write_local(local, parts, sync=False, parts_kept=parts_kept, release=release, sha256=sha256)
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
