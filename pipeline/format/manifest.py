"""`manifest.json`: the contract between the pipeline that writes shards and every reader.

Written last by the pipeline; a reader trusts it and never globs. Importable without Apache Beam.
Every field is described in docs/output-format.md; in short (format_version 1):

  format, format_version, created_by   what wrote it
  split, seq_len, features             records hold seq_len + 1 tokens (pipeline/format/records.py)
  tokenizer                            model file name and sha256, vocab_size, special ids, backend
  shards                               [{path (relative to the manifest), records, bytes, sha256}]
  totals                               records, label_tokens, bytes, documents_kept, lines
  subsets                              per subset: documents, kept, filtered by reason, text_bytes,
                                       tokens, tokens_with_epochs, epochs, selected
  dead_letters                         by_reason, records, files [{path, records, bytes, sha256}]
  packing                              remainder_policy and the records/labels of each packing step
  inputs                               per input file: path, lines, decompressed_bytes, chunks[, damaged]
  shuffle                              method, seed, num_shards
  config                               the options that decide the output bytes
  provenance                           with --provenance only: files [{path, bytes, sha256}]
                                       (pipeline/format/provenance.py)
"""

from __future__ import annotations

import json
import posixpath

import fsspec

MANIFEST_NAME = "manifest.json"
FORMAT = "pile-token-shards"
FORMAT_VERSION = 1


class ManifestError(ValueError):
    """The manifest is missing, unreadable, or does not describe a usable output."""


def manifest_path(output_dir: str) -> str:
    """Where the manifest of an output directory lives."""
    return posixpath.join(output_dir.rstrip("/"), MANIFEST_NAME)


def serialize(manifest: dict) -> str:
    """The manifest's text: sorted keys, one space of indent, so that equal manifests are equal bytes."""
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


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
