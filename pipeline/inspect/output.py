"""An output as inspection reads it: its manifest (any format) and its removed/ records, checked.

A --split_by output is read through its run's record, OUT/buckets.json (pipeline/format/buckets.py),
which holds what a manifest holds of the whole run; its buckets have no removals of their own.

Everything read back is untrusted, even files the job wrote: a removed/ file is read only when the
manifest lists it inside the directory of the run that wrote it, and only with the size and sha256
listed; each of its lines must be a JSON object with a record's own keys of the right types, in
(file_index, line) order (docs/output-format.md, "Removed documents"). The files of one input file
are named after it (`removed/<split>-<file index>-<first chunk>.jsonl`), so its records are read
file by file, in order, without the others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import re
from collections.abc import Iterator

import fsspec

from pipeline.format import buckets, jsonl, megatron
from pipeline.format.manifest import MIXTURE_NAME, ManifestError, OtherFormat, load_manifest, run_dir
from pipeline.io.urls import redact_url

# What every removed/ record holds (a stage's rule and fields, dedup's twin, ... come on top).
RECORD_TYPES = {"file_index": int, "line": int, "reason": str, "subset": str}
_NAME = re.compile(r"-(\d+)-(\d+)\.jsonl$")
MAX_RECORD_FILE_BYTES = 1 << 30  # one file covers 64 chunks of an input: a few MB of records


@dataclasses.dataclass(frozen=True)
class RemovedFile:
    """One removed/ file the manifest lists: the input file it covers, from which chunk on."""

    file_index: int
    first_chunk: int
    url: str
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Output:
    """A pipeline output (TFRecord, Megatron or JSON lines) read for inspection: where it is, its manifest."""

    location: str
    manifest: dict

    @classmethod
    def open(cls, location: str) -> Output:
        """Load and check the manifest of the output at `location` (ManifestError naming what is wrong).

        A --split_by output's OUT is read through buckets.json, the run's record (its counts, dead
        letters and removed/ files); a bucket of it, or a --per_subset output's OUT, is refused in
        one line naming what to pass instead.
        """
        location = location.rstrip("/") or "/"
        if location.endswith(".json"):
            location = posixpath.dirname(location)
        fs, root = fsspec.core.url_to_fs(location)
        if fs.isfile(posixpath.join(root, buckets.BUCKETS_NAME)):
            return cls(location, buckets.load_buckets(buckets.buckets_path(location)))
        try:
            manifest = load_manifest(location)
        except OtherFormat as e:
            loader = {megatron.FORMAT: megatron.load_manifest, jsonl.FORMAT: jsonl.load_manifest}.get(e.found)
            if loader is None:
                raise
            manifest = loader(location)
        except ManifestError:
            if fs.exists(posixpath.join(root, MIXTURE_NAME)):
                raise ManifestError(_per_subset_refusal(location)) from None
            raise
        if isinstance(manifest.get("bucket"), dict):
            parent = posixpath.dirname(location) or "."
            raise ManifestError(f"{redact_url(location)} is one bucket of a --split_by output: the documents the run "
                                f"removed and its counts are the run's, in no bucket; pass the output, "
                                f"{redact_url(parent)}")
        return cls(location, manifest)

    @property
    def buckets(self) -> list[dict] | None:
        """A --split_by output's buckets (buckets.json's entries), or None for one output."""
        return self.manifest.get("buckets") if self.manifest.get("format") == buckets.FORMAT else None

    @property
    def shown(self) -> str:
        """The location, credentials left out."""
        return redact_url(self.location)

    @property
    def inputs(self) -> list[dict]:
        """The manifest's `inputs`: per input file its path, lines, decompressed_bytes, ..."""
        return self.manifest.get("inputs", [])

    @property
    def config(self) -> dict:
        """The options the run recorded."""
        return self.manifest.get("config", {})

    @property
    def removed(self) -> dict | None:
        """The manifest's `removed` block, or None when the run listed no removals (no stage, no dedup)."""
        return self.manifest.get("removed")

    def require_removed(self) -> dict:
        """The `removed` block; a ValueError (the command's one line) for an output without one."""
        if self.removed is None:
            raise ValueError(f"{self.shown} lists no removed documents: it was written without --filters, "
                             "--dedup or --decontaminate")
        return self.removed

    def cut_reasons(self) -> set[str]:
        """The reasons whose records keep their document, cut (`<stage>_cut`, `contaminated_cut`)."""
        removed = self.removed or {}
        return set(removed.get("cut_by_reason", {})) | set(removed.get("cut_rules", {}))

    def is_cut(self, record: dict) -> bool:
        """Whether a record is a cut (its document kept, its text changed) rather than a removal."""
        return record["reason"] in self.cut_reasons()

    def removed_files(self) -> list[RemovedFile]:
        """The removed/ files the manifest lists, by (input file, first chunk); each checked to be the run's own."""
        removed = self.require_removed()
        prefix = f"{run_dir(self.manifest['run_id'])}/" if "run_id" in self.manifest else ""
        out = []
        for i, entry in enumerate(removed.get("files", [])):
            where = f"{self.shown}/manifest.json: removed.files[{i}]"
            rel = entry.get("path") if isinstance(entry, dict) else None
            if (not isinstance(rel, str) or not rel.startswith(prefix) or rel.startswith("/") or "://" in rel
                    or ".." in rel.split("/") or "\\" in rel or "\0" in rel):
                raise ManifestError(f"{where}: path {rel!r} is not a file of the run that wrote this manifest")
            match = _NAME.search(rel)
            size, sha = entry.get("bytes"), entry.get("sha256")
            if match is None or not isinstance(size, int) or not isinstance(sha, str):
                raise ManifestError(f"{where}: not a removed/ file's entry (path, bytes, sha256)")
            out.append(RemovedFile(int(match[1]), int(match[2]), posixpath.join(self.location, rel), size, sha))
        return sorted(out, key=lambda f: (f.file_index, f.first_chunk))

    def records(self, file_index: int | None = None) -> Iterator[dict]:
        """Every removed/ record (or those of one input file), in (file_index, line) order."""
        last = (-1, 0)
        for removed_file in self.removed_files():
            if file_index is None or removed_file.file_index == file_index:
                for record in read_records(removed_file, len(self.inputs)):
                    key = (record["file_index"], record["line"])
                    if key < last:
                        raise ManifestError(f"{redact_url(removed_file.url)}: records out of (file, line) order")
                    last = key
                    yield record


def _per_subset_refusal(location: str) -> str:
    """The line for a --per_subset output's OUT: each subset is an output of its own, named."""
    fs, root = fsspec.core.url_to_fs(location)
    names = sorted(posixpath.basename(p["name"].rstrip("/")) for p in fs.ls(root, detail=True)
                   if p.get("type") == "directory")
    shown = redact_url(location).rstrip("/")
    which = ", ".join(f"{shown}/{n}" for n in names[:5]) + (", ..." if len(names) > 5 else "")
    return (f"{shown} is a --per_subset output: each subset's output has its own removed documents and counts; "
            f"pass one of them{f' ({which})' if which else ''}")


def read_records(removed_file: RemovedFile, inputs: int) -> list[dict]:
    """The records of one removed/ file, after checking its size and sha256 against the manifest's."""
    shown = redact_url(removed_file.url)
    if removed_file.bytes > MAX_RECORD_FILE_BYTES:
        raise ManifestError(f"{shown}: the manifest lists {removed_file.bytes:,} bytes, more than a removed/ "
                            "file holds")
    try:
        with fsspec.open(removed_file.url, "rb") as f:
            data = f.read(removed_file.bytes + 1)
    except FileNotFoundError:
        raise ManifestError(f"{shown}: listed in the manifest, but not there") from None
    if len(data) != removed_file.bytes or hashlib.sha256(data).hexdigest() != removed_file.sha256:
        raise ManifestError(f"{shown}: not the file the manifest lists (its size or sha256 differs)")
    out = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not all(
                isinstance(record.get(k), t) and not isinstance(record.get(k), bool) for k, t in RECORD_TYPES.items()):
            raise ManifestError(f"{shown} line {number}: not a removed/ record")
        if record["file_index"] != removed_file.file_index or not 0 <= record["file_index"] < inputs:
            raise ManifestError(f"{shown} line {number}: file_index {record['file_index']} is not the file it covers")
        if not isinstance(record.get("rule", ""), str):
            raise ManifestError(f"{shown} line {number}: its rule is not a string")
        out.append(record)
    return out


def rule_of(record: dict) -> str:
    """A record's rule ("" for dedup's records, which have none)."""
    return record.get("rule", "")
