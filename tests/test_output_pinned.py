"""The exact bytes of fixed small jobs: every shard, dead-letter file and the manifest, by sha256.

Any change to these digests changes what users' readers see. Refactors must leave them alone; a
deliberate change to the output must regenerate them (`python tests/test_output_pinned.py`) and
say why in the change. Regenerating refuses a change made without a new OUTPUT_VERSION
(pipeline/core/versions.py): a resumed run takes up only the work of a run of its own version.

The manifest and dead letters record the input files' absolute paths, so they are compared with the
repository's location replaced by "<repo>" and the test's temporary directory by "<tmp>" (and the
manifest's entries for dead-letter files carry the size and digest of the replaced text). Each run
writes into a directory named by a random run id (pipeline/io/outputs.py): the id is replaced by
"<run>" in paths and in the manifest; shards and dead letters do not contain it.
"""

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM

from pipeline.cli import run
from pipeline.core.versions import OUTPUT_VERSION

REPO = Path(__file__).resolve().parents[1]
PINNED_FILE = Path(__file__).parent / "data" / "pinned_output.json"
MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")
TRAIN = str(REPO / "sample_data" / "pile" / "train" / "*.jsonl.zst")

# Plain JSON lines (no compressor version in the way): good documents between bad ones.
ODD_LINES = [
    b'{"text": "first good document", "meta": {"pile_set_name": "Github"}}',
    b"not json at all",
    b'{"text": 5, "meta": {"pile_set_name": "Github"}}',
    b'{"text": "unknown subset", "meta": {"pile_set_name": "CommonCrawl"}}',
    b"",
    b'{"text": "   ", "meta": {"pile_set_name": "ArXiv"}}',
    b'{"text": "caf\xc3\xa9 \xe6\x95\xb0\xe6\x8d\xae and a last good one", "meta": {"pile_set_name": "ArXiv"}}',
    b'{"text": "bad \xff byte", "meta": {"pile_set_name": "ArXiv"}}',
]

CASES = {
    "defaults": ["--input", TRAIN, "--seq_len", "128", "--shard_size_mb", "1"],
    "options": ["--input", TRAIN, "--seq_len", "96", "--shard_size_mb", "0.5", "--document_boundaries",
                "--epochs", "pile_paper", "--add_bos", "--seed", "7", "--subsets", "uncopyrighted",
                "--remainder", "drop", "--chunk_mb", "0.25"],
    "dead_letters": ["--input", "<tmp>/odd.jsonl", "--seq_len", "16", "--max_dead_letter_fraction", "1"],
}


def run_case(name: str, tmp: Path) -> dict:
    """Run one case in `tmp`; returns {relative path: sha256} of everything it wrote."""
    (tmp / "odd.jsonl").write_bytes(b"\n".join(ODD_LINES) + b"\n")
    args = [a.replace("<tmp>", str(tmp)) for a in CASES[name]]
    out = tmp / "out"
    run_id = run.main([*args, "--output_dir", str(out), "--tokenizer_model", MODEL, *FAST_BEAM])["run_id"]

    def normalized(path: Path) -> bytes:
        data = path.read_bytes()
        if path.suffix == ".tfrecord":
            return data
        data = data.replace(str(REPO).encode(), b"<repo>").replace(str(tmp).encode(), b"<tmp>")
        return data.replace(run_id.encode(), b"<run>")

    digests = {str(p.relative_to(out)).replace(run_id, "<run>"): hashlib.sha256(normalized(p)).hexdigest()
               for p in sorted(out.rglob("*")) if p.is_file() and p.name != "manifest.json"}
    # The manifest lists the dead-letter files' sizes and digests: give it the normalized ones.
    manifest = json.loads(normalized(out / "manifest.json"))
    for entry in manifest["dead_letters"]["files"]:
        entry["bytes"] = len(normalized(out / entry["path"].replace("<run>", run_id)))
        entry["sha256"] = digests[entry["path"]]
    digests["manifest.json"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    return digests


def test_the_pins_were_made_with_this_output_version():
    assert json.loads(PINNED_FILE.read_text())["output_version"] == OUTPUT_VERSION, (
        "pipeline/core/versions.py OUTPUT_VERSION changed: regenerate the pins (python tests/test_output_pinned.py)")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_output_bytes_are_pinned(name, tmp_path):
    pinned = json.loads(PINNED_FILE.read_text())[name]
    assert run_case(name, tmp_path) == pinned


if __name__ == "__main__":
    results = {}
    for case in sorted(CASES):
        with tempfile.TemporaryDirectory() as d:
            results[case] = run_case(case, Path(d).resolve())
    before = json.loads(PINNED_FILE.read_text()) if PINNED_FILE.exists() else {}
    if before.get("output_version", 1) == OUTPUT_VERSION and any(before.get(c) != results[c] for c in CASES):
        sys.exit(f"the output changed: raise OUTPUT_VERSION (now {OUTPUT_VERSION}) in pipeline/core/versions.py, "
                 "then regenerate")
    PINNED_FILE.parent.mkdir(exist_ok=True)
    PINNED_FILE.write_text(json.dumps({**results, "output_version": OUTPUT_VERSION}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINNED_FILE}", file=sys.stderr)
