"""The output directory: what a run of ours writes there, and refusing or replacing a previous output.

out/
manifest.json                          written last; readers trust only what it lists
train-00000-of-00042.tfrecord ...      shards
dead_letters/train-00001-00000.jsonl   malformed lines of chunk 0 of input file 1
provenance/train-00001.npz             with --provenance: source spans of input file 1's records
.NAME.tmp-<uuid>                       temporary names (pipeline.io.publish), spill directory
"""

from __future__ import annotations

import json
import posixpath
import re

import fsspec

from pipeline.format.manifest import MANIFEST_NAME, manifest_path, serialize
from pipeline.io.publish import TEMP_NAME, publish_text
from pipeline.io.urls import redact_url

DEAD_LETTER_DIR = "dead_letters"
PROVENANCE_DIR = "provenance"  # pipeline/format/provenance.py
# Everything a run of ours may leave in an output directory.
_OURS = re.compile(
    r"^(manifest\.json|[A-Za-z0-9_]+-\d{5}-of-\d{5}\.tfrecord|" + DEAD_LETTER_DIR + "|" + PROVENANCE_DIR + r")$")


def shard_name(split: str, index: int, count: int) -> str:
    """`train-00000-of-00042.tfrecord`."""
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def dead_letter_name(split: str, file_index: int, chunk_index: int) -> str:
    """`dead_letters/train-00001-00000.jsonl`: the dead letters of one chunk of one input file."""
    return f"{DEAD_LETTER_DIR}/{split}-{file_index:05d}-{chunk_index:05d}.jsonl"


def is_ours(name: str) -> bool:
    """Whether an entry of an output directory is something a run of ours writes."""
    return bool(_OURS.match(name) or TEMP_NAME.match(name))


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
    foreign = sorted(e for e in entries if not is_ours(e))
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


def dead_letter_lines(records: list[dict]) -> list[bytes]:
    """JSON lines (ending in a newline) of dead-letter records, sorted by (file, line) for byte-identical reruns."""
    records = sorted(records, key=lambda r: (r["file_index"], r["line"]))
    return [json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n" for r in records]


def write_manifest(output_dir: str, manifest: dict) -> str:
    """Publish the manifest of an output directory (the last file a job writes); returns its path."""
    path = manifest_path(output_dir)
    publish_text(path, serialize(manifest))
    return path
