"""The shape of the job's manifests, pinned, and the check that a manifest written by a test has it.

A test that writes a manifest by hand (or through scripts/datagen/synthetic_output.py) stands in
for the job's output; a reader check of a field the job does not write would pass on it and fail
on every real output. So every such manifest must have the job's shape: each field it holds is one
the job writes, of the same JSON type, and it holds every field of the reader's contract (format,
seq_len, the token features, the tokenizer's sha256 and ids, the shards, the totals) that every job
manifest holds. `tests/data/manifest_shape.json` is the shape of real job manifests
(tests/test_manifest_shape.py runs the job to check it and regenerates it when run as a script).
"""

from __future__ import annotations

import json
from pathlib import Path

SHAPE_FILE = Path(__file__).parent / "data" / "manifest_shape.json"
# Objects whose keys are names in the data (subsets, reasons, file names), not fields: "*" stands for any.
MAPS = ("subsets", "subsets.*.filtered", "subsets.*.removed", "subsets.*.removed_tokens", "dead_letters.by_reason",
        "removed.by_reason", "removed.tokens_by_reason", "removed.cut_by_reason", "tokenizer.files",
        *(f"{where}{rules}{names}" for where in ("subsets.*.", "removed.") for rules in ("rules", "cut_rules")
          for names in ("", ".*")),
        "tokenizer.special_sources", "tokenizer.versions")
# Recorded options: keys and types vary with the options (and null means "not set"); shown as one object.
OPAQUE = ("config",)
# The reader's contract: the fields every job manifest holds here must be in every stand-in too.
CONTRACT = ("format", "format_version", "seq_len", "features.tokens.", "tokenizer.", "shards[].", "totals.")
BACKEND = "tokenizer.backend."  # which engine ran, and its checks: the job's business, not the reader's


def _type(value) -> str:
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "object"}[type(value)]


def shape(manifest: dict) -> dict[str, set[str]]:
    """{dotted path: the JSON types found there}; list items are `path[]`, names in MAPS are `*`."""
    found: dict[str, set[str]] = {}

    def walk(path: str, value) -> None:
        found.setdefault(path, set()).add(_type(value))
        if path in OPAQUE:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{path}.{'*' if path in MAPS else key}".lstrip("."), item)
        elif isinstance(value, list):
            for item in value:
                walk(path + "[]", item)

    for key, item in manifest.items():
        walk(key, item)
    return found


def pinned() -> dict:
    """{"types": {path: [types]}, "always": [paths every job manifest holds]}."""
    return json.loads(SHAPE_FILE.read_text())


def problems(manifest: dict, pin: dict | None = None) -> list[str]:
    """How `manifest` departs from the job's shape (empty: it has it)."""
    pin = pin or pinned()
    types, always = pin["types"], set(pin["always"])
    out = []
    mine = shape(manifest)
    for path, kinds in sorted(mine.items()):
        if path not in types:
            out.append(f"{path}: the job writes no such field")
            continue
        for kind in sorted(kinds):
            if kind not in types[path] and not (kind == "int" and "float" in types[path]):
                out.append(f"{path}: {kind}, where the job writes {'/'.join(types[path])}")
    for path in sorted(always):
        if path.startswith(CONTRACT) and not path.startswith(BACKEND) and path not in mine:
            out.append(f"{path}: missing (every job manifest holds it)")
    return out


def assert_job_shaped(manifest: dict) -> dict:
    """`manifest` itself, once checked to have the job's shape (AssertionError listing what differs)."""
    found = problems(manifest)
    assert not found, "a stand-in manifest departs from the job's: " + "; ".join(found)
    return manifest
