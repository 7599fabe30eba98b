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
import math
import posixpath

import fsspec

MANIFEST_NAME = "manifest.json"
MIXTURE_NAME = "mixture.json"  # what a --per_subset output holds instead (pipeline/format/mixture.py)
FORMAT = "pile-token-shards"
FORMAT_VERSION = 1
FORMAT_MEGATRON = "pile-megatron-indexed"  # pipeline/format/megatron.py
FORMAT_JSONL = "pile-cleaned-text"  # pipeline/format/jsonl.py
MAX_MANIFEST_BYTES = 1 << 30  # the Pile's manifest is a few MB; anything near this is not one of ours


class ManifestError(ValueError):
    """The manifest is missing, unreadable, or does not describe a usable output."""


class OtherFormat(ManifestError):
    """A manifest of another format than the caller reads (`found`: its format marker)."""

    def __init__(self, message: str, found):
        super().__init__(message)
        self.found = found


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
        folder = posixpath.dirname(path)
        if fs.exists(posixpath.join(posixpath.dirname(fs_path), MIXTURE_NAME)):
            mixture = posixpath.join(folder, MIXTURE_NAME)
            raise ManifestError(
                f"{folder} is a --per_subset or --split_by output: one output per subset or bucket, read together "
                f"as a mixture; pass {mixture} (make_dataset(\"{mixture}\", ...)), or one of its directories")
        raise ManifestError(
            f"No manifest at {path}: the output is incomplete (a job still running or one that "
            "failed) or this is not a pipeline output directory. Refusing to read it."
        )
    if not fs.isfile(fs_path) or (fs.size(fs_path) or 0) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: not a regular file of at most {MAX_MANIFEST_BYTES:,} bytes")
    with fs.open(fs_path, "rb") as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    return parse_manifest(data, path, fmt, version)


def parse_manifest(data: bytes, path: str, fmt: str = FORMAT, version: int = FORMAT_VERSION) -> dict:
    """The manifest in `data`, checked whole (`validate_manifest`); ManifestError for anything else."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_MANIFEST_BYTES:,} bytes")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ManifestError(f"{path} is not valid JSON: {str(e)[:200]}") from None
    validate_manifest(manifest, path, fmt, version)
    return manifest


class _INTEGER:  # noqa: N801 -- a kind for `_get`: any integer, negative too
    pass


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _get(obj: dict, key: str, kind, where: str, optional: bool = False):
    """obj[key], of type `kind` (int: not a bool, and >= 0); ManifestError naming `where` otherwise."""
    if key not in obj or (optional and obj[key] is None):
        if optional:
            return None
        raise ManifestError(f"{where}: {key!r} is missing")
    value = obj[key]
    ok = isinstance(value, kind) and not (kind is int and (isinstance(value, bool) or value < 0))
    if kind is float:  # a finite number (JSON's 1e999 is infinite)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind is _INTEGER:
        ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok:
        wanted = {int: "a count (an integer >= 0)", str: "a string", dict: "an object", list: "a list",
                  float: "a finite number", _INTEGER: "an integer"}[kind]
        raise ManifestError(f"{where}: {key!r} is {_kind(value)}, not {wanted}")
    return value


def _items(obj: dict, key: str, where: str, optional: bool = False) -> list[dict]:
    """obj[key]: a list of objects."""
    items = _get(obj, key, list, where, optional) or []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ManifestError(f"{where}: {key}[{i}] is {_kind(item)}, not an object")
    return items


def _relative_path(entry: dict, where: str) -> str:
    rel = _get(entry, "path", str, where)
    if not rel or rel.startswith("/") or ".." in rel.split("/") or "://" in rel or "\\" in rel or "\0" in rel:
        raise ManifestError(f"{where}: path {rel!r} escapes the output directory")
    return rel


def validate_manifest(manifest, path: str, fmt: str = FORMAT, version: int = FORMAT_VERSION) -> None:
    """Check the whole manifest's shape once, so that no reader or command meets a wrong type later.

    A manifest with a run id (every output since run directories) must hold every field the reader
    and the commands use; in an older one (and in the reader's test outputs) only the reader's
    fields are required, and the others checked where present. Every file it lists (shards, dead
    letters, provenance) must be a relative path inside the directory of the run that wrote it
    (`check_run`). Raises ManifestError naming the field.
    """
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: a manifest is a JSON object, not {_kind(manifest)}")
    if manifest.get("format") != fmt:
        found = manifest.get("format")
        if found == FORMAT_MEGATRON and fmt == FORMAT:
            raise OtherFormat(f"{path}: a Megatron output (format {found!r}), which Megatron-LM and NeMo read "
                              "(`pile-pipeline data-path` prints their --data-path); `pile-pipeline show` shows it",
                              found)
        if found == FORMAT_JSONL:
            raise OtherFormat(f"{path}: a cleaned-text output (JSON lines, no tokens; format {found!r}): read it with "
                              "datasets.load_dataset(\"json\", ...) or datatrove's JsonlReader (docs/jsonl.md), not "
                              "with what reads tokens (show, provenance, data-path, tf.data)", found)
        raise OtherFormat(f"{path}: format {found!r}, expected {fmt!r}", found)
    if manifest.get("format_version") != version:
        raise ManifestError(
            f"{path}: format_version {manifest.get('format_version')!r}; this reader understands "
            f"{version}. Upgrade the reader or re-run the pipeline."
        )
    _get(manifest, "run_id", str, path, optional=True)
    lax = "run_id" not in manifest  # an older manifest: what the reader needs, and the rest where present
    listed = []
    for i, shard in enumerate(_items(manifest, "shards", path)):
        where = f"{path}: shards[{i}]"
        listed.append(_relative_path(shard, where))
        if fmt == FORMAT:
            _get(shard, "records", int, where)
            _get(shard, "bytes", int, where)
            _get(shard, "sha256", str, where, optional=True)
        for part in ("bin", "idx"):
            entry = _get(shard, part, dict, where, optional=fmt != FORMAT_MEGATRON)
            if entry is not None:
                listed.append(_relative_path(entry, f"{where}.{part}"))
                _get(entry, "bytes", int, f"{where}.{part}")
    listed += validate_run_entries(manifest, path, lax)
    provenance = _get(manifest, "provenance", dict, path, optional=True)
    if provenance:
        for i, entry in enumerate(_items(provenance, "files", f"{path}: provenance")):
            listed.append(_relative_path(entry, f"{path}: provenance.files[{i}]"))
    if fmt == FORMAT:
        seq_len = _get(manifest, "seq_len", int, path)
        if seq_len < 1:
            raise ManifestError(f"{path}: seq_len {seq_len} is not >= 1")
        tokenizer = _get(manifest, "tokenizer", dict, path, optional=lax) or {}
        _get(tokenizer, "sha256", str, f"{path}: tokenizer", optional=lax)
        _get(tokenizer, "model", str, f"{path}: tokenizer", optional=True)
        _get(tokenizer, "eos_id", _INTEGER, f"{path}: tokenizer", optional=lax)
        features = _get(manifest, "features", dict, path)
        tokens = features.get("tokens")
        if not isinstance(tokens, dict):
            raise ManifestError(f"{path}: features: 'tokens' is {_kind(tokens)}, not an object")
        packing = _get(manifest, "packing", dict, path, optional=lax)
        if packing is not None:
            _get(packing, "remainder_policy", str, f"{path}: packing", optional=lax)
        shuffle = _get(manifest, "shuffle", dict, path, optional=lax)
        if shuffle is not None:
            _get(shuffle, "seed", _INTEGER, f"{path}: shuffle", optional=lax)
            _get(shuffle, "num_shards", int, f"{path}: shuffle", optional=lax)
    check_run(manifest, path, listed)


def validate_run_entries(record: dict, path: str, lax: bool = False) -> list[str]:
    """Check the entries a run's record shares with every manifest (totals, subsets, dead letters, inputs, config).

    Returns the dead-letter files it lists. `lax`: only those present (an older manifest). Raises
    ManifestError naming the field.
    """
    totals = _get(record, "totals", dict, path, optional=lax) or {}
    for key in ("records", "documents", "documents_kept", "lines", "label_tokens", "bytes"):
        _get(totals, key, int, f"{path}: totals", optional=True)
    for name, subset in (_get(record, "subsets", dict, path, optional=lax) or {}).items():
        if not isinstance(subset, dict):
            raise ManifestError(f"{path}: subsets[{name!r}] is {_kind(subset)}, not an object")
        _get(subset, "filtered", dict, f"{path}: subsets[{name!r}]", optional=True)
    dead = _get(record, "dead_letters", dict, path, optional=lax) or {}
    _get(dead, "by_reason", dict, f"{path}: dead_letters", optional=lax)
    _get(dead, "records", int, f"{path}: dead_letters", optional=lax)
    listed = [_relative_path(entry, f"{path}: dead_letters.files[{i}]")
              for i, entry in enumerate(_items(dead, "files", f"{path}: dead_letters", optional=lax))]
    for i, entry in enumerate(_items(record, "inputs", path, optional=True)):
        _get(entry, "path", str, f"{path}: inputs[{i}]")
    config = _get(record, "config", dict, path, optional=True)
    if config is not None:
        _get(config, "max_line_mb", float, f"{path}: config", optional=True)
        _get(config, "tokenizer_model", str, f"{path}: config", optional=True)
    return listed


def run_dir(run_id: str) -> str:
    """`run-<run id>`: where, relative to the output directory, a run writes its files."""
    return f"run-{run_id}"


def check_run(manifest: dict, path: str, listed: list[str] | None = None) -> None:
    """Refuse a manifest that lists a file outside the directory of the run that wrote it.

    `listed`: every file it lists (its shards' paths when not given). No other run writes into a
    run's directory, so a manifest that passes lists only its own files. Manifests without a run
    id (written before run directories) have nothing to check.
    """
    run_id = manifest.get("run_id")
    if run_id is None:
        return
    prefix = run_dir(run_id) + "/"
    listed = [s["path"] for s in manifest["shards"]] if listed is None else listed
    strangers = [rel for rel in listed if not rel.startswith(prefix)]
    if strangers:
        raise ManifestError(
            f"{path}: file(s) {strangers[:3]} are not in {prefix}, the directory of the run that wrote "
            "this manifest: they are not its own"
        )


def shard_url(manifest_file: str, shard: dict) -> str:
    """Absolute location of a shard listed in a manifest (same filesystem as the manifest)."""
    base = manifest_file if not manifest_file.endswith(".json") else posixpath.dirname(manifest_file)
    return posixpath.join(base, shard["path"])
