"""`manifest.json`: the contract between the pipeline that writes shards and every reader.

Written last by the pipeline; a reader trusts it and never globs. Importable without Apache Beam.
Every field is described in docs/output-format.md; in short (format_version 1):

  format, format_version, created_by   what wrote it
  run_id                               the run that wrote it: its files are all in run-<run_id>/
  split, seq_len, features             records hold seq_len + 1 tokens (pipeline/format/records.py)
  tokenizer                            model file name and sha256, vocab_size, special ids, backend
  shards                               [{path (relative to the manifest), records, bytes, sha256}]
  totals                               records, label_tokens, bytes, documents_kept, lines
  subsets                              per subset: documents, kept, filtered by reason, text_bytes,
                                       tokens, tokens_with_epochs, epochs, selected
  dead_letters                         by_reason, records, files [{path, records, bytes, sha256}]
  packing                              remainder_policy and the records/labels of each packing step
  inputs                               per input file: path, lines, decompressed_bytes, chunks,
                                       byte_order_mark, duplicate_keys {ambiguous, elsewhere}[, damaged]
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


def load_manifest(path_or_dir: str, fmt: str = FORMAT, version: int = FORMAT_VERSION) -> dict:
    """Read and check a manifest; accepts the output directory or the manifest file itself.

    `fmt` and `version`: what the caller reads (a Megatron output has its own, pipeline/format/megatron.py).
    """
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
    if manifest.get("format") != fmt:
        raise ManifestError(f"{path}: format {manifest.get('format')!r}, expected {fmt!r}")
    if manifest.get("format_version") != version:
        raise ManifestError(
            f"{path}: format_version {manifest.get('format_version')!r}; this reader understands "
            f"{version}. Upgrade the reader or re-run the pipeline."
        )
    for shard in manifest["shards"]:
        rel = shard["path"]
        if rel.startswith("/") or ".." in rel.split("/") or "://" in rel:
            raise ManifestError(f"{path}: shard path {rel!r} escapes the output directory")
    check_run(manifest, path)
    return manifest


def run_dir(run_id: str) -> str:
    """`run-<run id>`: where, relative to the output directory, a run writes its files."""
    return f"run-{run_id}"


def check_run(manifest: dict, path: str) -> None:
    """Refuse a manifest that lists a shard outside the directory of the run that wrote it.

    No other run writes into a run's directory, so a manifest that passes lists only its own shards.
    Manifests without a run id (written before run directories) have nothing to check.
    """
    run_id = manifest.get("run_id")
    if run_id is None:
        return
    prefix = run_dir(run_id) + "/"
    strangers = [s["path"] for s in manifest["shards"] if not s["path"].startswith(prefix)]
    if strangers:
        raise ManifestError(
            f"{path}: shard(s) {strangers[:3]} are not in {prefix}, the directory of the run that wrote "
            "this manifest: they are not its own"
        )


def shard_url(manifest_file: str, shard: dict) -> str:
    """Absolute location of a shard listed in a manifest (same filesystem as the manifest)."""
    base = manifest_file if not manifest_file.endswith(".json") else posixpath.dirname(manifest_file)
    return posixpath.join(base, shard["path"])
