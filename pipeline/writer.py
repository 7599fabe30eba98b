"""Output directory handling: refuse or clear it, write shards and dead letters atomically.

A shard is written under a hidden temporary name in the output directory itself (so on EFS/NFS
the rename stays within one filesystem and is atomic), verified by reading it back, then renamed.
On object stores (s3://) it is written to local disk and uploaded with one PUT, which makes the
object appear only when complete (S3 has no atomic rename; copy + delete could expose a partial).
Readers never see a partial shard; they read only what the manifest lists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import tempfile
import uuid
from collections.abc import Iterable

import fsspec

from pipeline.manifest import MANIFEST_NAME
from pipeline.read import redact_url

LOG = logging.getLogger(__name__)
DEAD_LETTER_DIR = "dead_letters"
# Everything a run of ours may leave in an output directory.
_OURS = re.compile(
    r"^(manifest\.json|[A-Za-z0-9_]+-\d{5}-of-\d{5}\.tfrecord|\..*\.tmp-[0-9a-f]{32}|" + DEAD_LETTER_DIR + r")$"
)


def shard_name(split: str, index: int, count: int) -> str:
    """`train-00000-of-00042.tfrecord`."""
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def is_local(fs) -> bool:
    """Whether an fsspec filesystem is the local one."""
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
    """Create the output directory, refusing a non-empty one unless `overwrite`.

    With `overwrite`, the old manifest goes first (so readers stop trusting the old output at once),
    then every file a run of ours leaves; anything else there is left alone and refused.
    """
    fs, root = fsspec.core.url_to_fs(output_dir)
    shown = redact_url(output_dir)
    if not fs.exists(root):
        fs.makedirs(root, exist_ok=True)
        return
    if not fs.isdir(root):
        raise FileExistsError(f"--output_dir {shown} exists and is not a directory")
    entries = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)]
    if not entries:
        return
    if not overwrite:
        state = "a finished output" if MANIFEST_NAME in entries else "an incomplete or foreign output"
        raise FileExistsError(
            f"--output_dir {shown} is not empty ({state}: {len(entries)} entries). Pass --overwrite to "
            "replace it, or choose an empty directory."
        )
    foreign = sorted(e for e in entries if not _OURS.match(e))
    if foreign:
        raise FileExistsError(
            f"--overwrite refused: {shown} holds files this pipeline did not write: {foreign[:5]}. "
            "Remove them or choose another directory."
        )
    if MANIFEST_NAME in entries:
        fs.rm(posixpath.join(root, MANIFEST_NAME))
    for entry in entries:
        if entry != MANIFEST_NAME:
            fs.rm(posixpath.join(root, entry), recursive=True)


def _write_local(path: str, parts) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "wb") as f:
        for part in parts:
            f.write(part)
            digest.update(part)
            size += len(part)
        f.flush()
        os.fsync(f.fileno())
    return size, digest.hexdigest()


def _sha256_of(fs, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def write_file_atomically(output_dir: str, name: str, parts: Iterable[bytes], num_records: int) -> dict:
    """Write `parts` (bytes-like: framed records of a shard, or lines) back to back and publish them as `name`.

    Returns {"path", "records": num_records, "bytes", "sha256"}. Safe to run twice at once (Dataflow
    may retry a bundle while the first attempt still runs): each attempt has its own temp file, and
    both produce the same bytes. `parts` may be iterated once only.
    """
    fs, root = fsspec.core.url_to_fs(output_dir)
    final = posixpath.join(root, name)
    if is_local(fs):
        fs.makedirs(posixpath.dirname(final), exist_ok=True)
        tmp = posixpath.join(posixpath.dirname(final), f".{posixpath.basename(name)}.tmp-{uuid.uuid4().hex}")
        try:
            size, sha = _write_local(tmp, parts)
            if os.path.getsize(tmp) != size or _sha256_of(fs, tmp) != sha:
                raise OSError(f"verification of {tmp} failed after writing")
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    else:
        with tempfile.TemporaryDirectory() as local_dir:
            tmp = os.path.join(local_dir, "part")
            size, sha = _write_local(tmp, parts)
            fs.put_file(tmp, final)
        if fs.size(final) != size:
            raise OSError(f"upload of {redact_url(output_dir)}/{name} is incomplete")
    return {"path": name, "records": num_records, "bytes": size, "sha256": sha}


def dead_letter_lines(records: list[dict]) -> list[bytes]:
    """JSON lines (ending in a newline) of dead-letter records, sorted by (file, line) for byte-identical reruns."""
    records = sorted(records, key=lambda r: (r["file_index"], r["line"]))
    return [json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n" for r in records]
