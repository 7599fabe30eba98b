"""`manifest.json`: the contract between the pipeline that writes shards and every reader.

Written last, atomically, by the pipeline; a reader trusts it and never globs. Importable without
Apache Beam. Top-level fields (format_version 1):

  format, format_version, created_by   what wrote it
  split, seq_len                       records hold seq_len + 1 tokens (see pipeline/records.py)
  features                             name -> {kind, dtype, byte_order, shape[, default]}
  tokenizer                            model sha256, vocab_size, bos/eos/pad/unk ids, add_bos/add_eos
  shards                               [{path (relative to the manifest), records, bytes, sha256}]
  totals                               records, label tokens, padding, bytes
  subsets                              per subset: documents read/kept/filtered/dead-lettered, tokens
  packing                              sequences from chunks/tails, remainder policy and its count
  dead_letters                         {path, records, sha256} or null
  inputs                               per input file: lines, decompressed bytes, chunks, skipped?
  config                               the full pipeline config that produced it
"""

from __future__ import annotations

import json
import os
import posixpath
import uuid

import fsspec

MANIFEST_NAME = "manifest.json"
FORMAT = "pile-token-shards"
FORMAT_VERSION = 1


class ManifestError(ValueError):
    """The manifest is missing, unreadable, or does not describe a usable output."""


def manifest_path(output_dir: str) -> str:
    """Where the manifest of an output directory lives."""
    return posixpath.join(output_dir.rstrip("/"), MANIFEST_NAME)


# Object stores make an object visible only once its one PUT is complete, and have no rename
# (s3fs's mv is copy + delete): there the file is written in one request, with no temp object.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})


def write_text_atomically(path: str, text: str) -> None:
    """Publish `text` at `path` complete or not at all.

    Local, EFS/NFS and other filesystems: a temporary name in the same directory (so the rename
    stays within one filesystem and is atomic), flushed to disk, then renamed. Object stores: one PUT.
    """
    fs, fs_path = fsspec.core.url_to_fs(path)
    data = text.encode("utf-8")
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if _OBJECT_STORES.intersection(protocols):
        fs.pipe_file(fs_path, data)
        return
    parent = posixpath.dirname(fs_path)
    tmp = posixpath.join(parent, f".{posixpath.basename(fs_path)}.tmp-{uuid.uuid4().hex}")
    if "file" in protocols:
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, fs_path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, fs_path)


def write_manifest(output_dir: str, manifest: dict) -> str:
    """Serialize deterministically (sorted keys) and write atomically; returns the path."""
    path = manifest_path(output_dir)
    write_text_atomically(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return path


def load_manifest(path_or_dir: str) -> dict:
    """Read and check a manifest; accepts the output directory or the manifest file itself."""
    path = path_or_dir if path_or_dir.endswith(".json") else manifest_path(path_or_dir)
    fs, fs_path = fsspec.core.url_to_fs(path)
    # A cached listing (s3fs keeps one per directory) may predate the job's last write.
    fs.invalidate_cache(posixpath.dirname(fs_path))
    if not fs.exists(fs_path):
        raise ManifestError(
            f"No manifest at {path}: the output is incomplete (a job still running or one that "
            "failed) or this is not a pipeline output directory. Refusing to read it."
        )
    with fs.open(fs_path, "r", encoding="utf-8") as f:
        try:
            manifest = json.load(f)
        except json.JSONDecodeError as e:
            raise ManifestError(f"{path} is not valid JSON: {e}") from e
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ManifestError(
            f"{path}: format_version {manifest.get('format_version')!r}; this reader understands "
            f"{FORMAT_VERSION}. Upgrade the reader or re-run the pipeline."
        )
    for shard in manifest["shards"]:
        rel = shard["path"]
        if rel.startswith("/") or ".." in rel.split("/") or "://" in rel:
            raise ManifestError(f"{path}: shard path {rel!r} escapes the output directory")
    return manifest


def shard_url(manifest_file: str, shard: dict) -> str:
    """Absolute location of a shard listed in a manifest (same filesystem as the manifest)."""
    base = manifest_file if not manifest_file.endswith(".json") else posixpath.dirname(manifest_file)
    return posixpath.join(base, shard["path"])
