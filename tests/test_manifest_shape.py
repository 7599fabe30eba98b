"""Manifests that stand in for the job's output have the job's shape (tests/manifest_shape.py).

The pinned shape is that of real job manifests (a SentencePiece job with dead letters; a
tokenizer.json job with best-fit packing, provenance and exact dedup): the slow test runs them and
compares. Regenerate after a deliberate change to what the job writes: `python tests/test_manifest_shape.py`.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from manifest_shape import SHAPE_FILE, assert_job_shaped, pinned, problems, shape
from synthetic_output import write_output

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")
SAMPLE = str(REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst")


def job_manifests(tmp: Path) -> list[dict]:
    """The manifests of jobs that between them write every field the job writes."""
    from kind_fixtures import train_byte_level_bpe, write_hf_directory

    from pipeline.cli import run

    odd = write_lines(str(tmp / "odd.jsonl"), [pile_line("a good one " * 20, "ArXiv"), b"{not json",
                                               pile_line("a good one " * 20, "ArXiv")], compression="none")
    hf = write_hf_directory(train_byte_level_bpe(600), tmp / "hf")
    runs = [
        ["--input", SAMPLE, "--input", odd, "--tokenizer_model", MODEL, "--max_dead_letter_fraction", "1"],
        ["--input", SAMPLE, "--input", odd, "--tokenizer_model", str(hf), "--packing", "best_fit", "--provenance",
         "--dedup", "exact", "--max_dead_letter_fraction", "1"],
    ]
    return [run.main([*argv, "--output_dir", str(tmp / f"out{i}"), "--seq_len", "64", *FAST_BEAM])
            for i, argv in enumerate(runs)]


def shape_of_jobs(manifests: list[dict]) -> dict:
    types: dict[str, set[str]] = {}
    always = None
    for m in manifests:
        found = shape(m)
        for path, kinds in found.items():
            types.setdefault(path, set()).update(kinds)
        always = set(found) if always is None else always & set(found)
    return {"types": {p: sorted(k) for p, k in sorted(types.items())}, "always": sorted(always or ())}


def dump_shape(found: dict) -> str:
    """The shape as JSON, a path's few types on its own line (the file stays short enough to read)."""
    text = json.dumps(found, indent=1)
    few = re.compile(r'\[\n\s+("[^"\n]*"(?:,\n\s+"[^"\n]*"){0,3})\n\s+\]')
    return few.sub(lambda m: "[" + re.sub(r",\n\s+", ", ", m.group(1)) + "]", text) + "\n"


def test_the_pinned_shape_file_is_its_dump():
    assert SHAPE_FILE.read_text() == dump_shape(pinned())


@pytest.mark.slow
def test_the_jobs_manifests_have_the_pinned_shape(tmp_path):
    assert shape_of_jobs(job_manifests(tmp_path)) == pinned(), "regenerate: python tests/test_manifest_shape.py"


@pytest.mark.parametrize("kw", [{}, {"dtype": "<i4", "document_boundaries": False, "padded_record": 3},
                                {"subsets": {"Pile-CC": {"tokens": 40}}, "tokenizer": {"eos_id": 7}}])
def test_synthetic_outputs_have_the_jobs_shape(tmp_path, kw):
    assert_job_shaped(write_output(str(tmp_path), [5, 4], **kw))


def test_a_field_the_job_does_not_write_is_caught(tmp_path):
    """A stand-in with `tokenizer.model_sha256` (the job writes `tokenizer.sha256`) let a mixture check pass."""
    manifest = write_output(str(tmp_path), [3])
    manifest["tokenizer"]["model_sha256"] = manifest["tokenizer"].pop("sha256")
    found = problems(manifest)
    assert "tokenizer.model_sha256: the job writes no such field" in found
    assert "tokenizer.sha256: missing (every job manifest holds it)" in found
    manifest["tokenizer"]["sha256"] = 5
    manifest["dead_letters"] = None
    assert any(p.startswith("tokenizer.sha256: int") for p in problems(manifest))
    assert any(p.startswith("dead_letters: null") for p in problems(manifest))


def test_every_test_writing_a_manifest_checks_its_shape():
    """A test that writes a manifest with the job's writer (`write_manifest`) checks it has the job's shape."""
    unchecked = [p.name for p in sorted(TESTS.rglob("*.py"))
                 if re.search(r"\bwrite_manifest\(", p.read_text()) and "assert_job_shaped" not in p.read_text()
                 and p.name != Path(__file__).name]
    assert not unchecked, unchecked


def test_the_pin_is_a_real_jobs_shape():
    pin = pinned()
    assert set(pin["always"]) <= set(pin["types"])
    for path in ("tokenizer.sha256", "tokenizer.vocab_size", "tokenizer.eos_id", "features.tokens.dtype",
                 "shards[].sha256", "seq_len"):
        assert path in pin["always"], path
    assert "tokenizer.model_sha256" not in pin["types"]


if __name__ == "__main__":
    sys.path[:0] = [str(TESTS), str(REPO / "scripts" / "datagen")]
    with tempfile.TemporaryDirectory() as tmp:
        SHAPE_FILE.write_text(dump_shape(shape_of_jobs(job_manifests(Path(tmp)))))
    print(f"wrote {SHAPE_FILE}")
