"""Our Megatron output read by Megatron's own code, and compared with Megatron's own preprocessing.

1. megatron-core (`IndexedDataset`, `IndexedDatasetBuilder`, `GPTDataset` through
   `BlendedMegatronDatasetBuilder`) in the Megatron environment (.venv-megatron: megatron-core 0.16.1
   on torch's CPU build, scripts/setup_megatron_env.sh) reads our files: tests/megatron_check.py
   checks every document against SentencePiece on the input, the bytes against Megatron's own writer,
   and every GPTDataset sample. In CI (CI=true) a missing environment is a failure, elsewhere a skip.
2. With MEGATRON_LM=<a Megatron-LM checkout at tag core_v0.16.1> (and the environment built with
   --with-tools), Megatron's `tools/preprocess_data.py --append-eod` runs on the same input and its
   documents equal ours, one for one, in the same order (ours leaves out whitespace-only texts,
   which it keeps). CI has no checkout (the repository is not a package), so there it is skipped.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from sample_corpus import compose_lines

from pipeline.cli import run
from pipeline.format import megatron as fmt

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("MEGATRON_VENV", REPO / ".venv-megatron"))
PYTHON = VENV / "bin" / "python"
CHECK = REPO / "tests" / "megatron_check.py"

pytestmark = pytest.mark.slow


def _require_megatron_env() -> None:
    if PYTHON.exists() and list(VENV.glob("lib/python3*/site-packages/megatron/core/datasets/indexed_dataset.py")):
        return
    reason = f"Megatron environment not found at {VENV}: build it with `bash scripts/setup_megatron_env.sh`"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[str]:
    """Two files in the Pile's format and one of edge cases; plain JSON lines, as preprocess_data.py reads them."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(11)
    paths = [write_lines(str(root / f"{i:02d}.jsonl"), compose_lines(rng, 45), compression="none") for i in range(2)]
    edge = [pile_line("a literal </s> and <s> inside a document", "Github"), pile_line("x", "ArXiv"),
            pile_line(" \t ", "Pile-CC"), pile_line("tabs\tand\r\nCRLF inside\u2028a line", "Enron Emails"),
            pile_line("\U0001f680 emoji and \u6570\u636e", "Wikipedia (en)")]
    paths.append(write_lines(str(root / "02.jsonl"), edge, compression="none"))
    return paths


def _megatron_job(corpus, out, model, *extra):
    return run.main(["--input", *corpus, "--output_dir", str(out), "--tokenizer_model", model,
                     "--output_format", "megatron", "--chunk_mb", "0.02", *extra, *FAST_BEAM])


def _check(out, corpus, model, tmp_path) -> dict:
    report = tmp_path / "report.json"
    proc = subprocess.run([str(PYTHON), str(CHECK), str(out), "--input", *corpus, "--tokenizer_model", model,
                           "--seq_length", "32", "--samples", "600", "--json", str(report)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(report.read_text())


def test_megatron_reads_every_document_and_sample(corpus, tiny_model, tmp_path):
    _require_megatron_env()
    out = tmp_path / "out"
    manifest = _megatron_job(corpus, out, tiny_model, "--shard_size_mb", "0.02")
    assert len(manifest["shards"]) >= 3
    report = _check(out, corpus, tiny_model, tmp_path)
    assert report["prefixes"] == len(manifest["shards"]) == report["datasets"]
    texts = [json.loads(line)["text"] for path in corpus for line in Path(path).read_bytes().splitlines()]
    assert report["documents"] == manifest["totals"]["documents"] == sum(bool(t.strip()) for t in texts) == 94
    assert report["tokens"] == manifest["totals"]["tokens"]
    assert report["gpt_samples_checked"] >= manifest["totals"]["tokens"] // 32 - len(manifest["shards"])
    assert sum(report["blend_draws"].values()) == report["blended"] >= 600


def test_megatron_reads_per_subset_outputs_with_bos(corpus, tiny_model, tmp_path):
    _require_megatron_env()
    out = tmp_path / "out"
    manifest = _megatron_job(corpus, out, tiny_model, "--per_subset", "--add_bos",
                             "--subsets", "Github,Wikipedia (en),Books3,Enron Emails")
    assert {s["subset"] for s in manifest["shards"]} == {"Github", "Wikipedia (en)", "Books3", "Enron Emails"}
    report = _check(out, corpus, tiny_model, tmp_path)
    assert report["prefixes"] == len(manifest["shards"]) == 4
    assert report["documents"] == manifest["totals"]["documents"]


def _read_prefix(prefix: str) -> list[np.ndarray]:
    index = fmt.read_index(Path(f"{prefix}.idx").read_bytes())
    data = np.fromfile(f"{prefix}.bin", index.dtype)
    return [data[p // index.dtype.itemsize:][:n] for p, n in zip(index.pointers, index.lengths, strict=True)]


def test_preprocess_data_writes_our_documents(corpus, tiny_model, tmp_path):
    """Megatron-LM's tools/preprocess_data.py --append-eod, on the same input: the same documents, in order."""
    checkout = os.environ.get("MEGATRON_LM")
    if not checkout:
        pytest.skip("set MEGATRON_LM to a Megatron-LM checkout (tag core_v0.16.1) to run its preprocess_data.py")
    _require_megatron_env()
    joined = tmp_path / "input.jsonl"  # preprocess_data.py reads one plain JSON-lines file
    joined.write_bytes(b"".join(Path(p).read_bytes() for p in sorted(corpus)))
    proc = subprocess.run([str(PYTHON), "-W", "ignore", f"{checkout}/tools/preprocess_data.py", "--input", str(joined),
                           "--output-prefix", str(tmp_path / "mlm"), "--tokenizer-type", "GPTSentencePieceTokenizer",
                           "--tokenizer-model", tiny_model, "--append-eod", "--workers", "2"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": checkout})
    assert proc.returncode == 0, proc.stderr[-4000:]
    theirs = _read_prefix(str(tmp_path / "mlm_text_document"))
    out = tmp_path / "out"
    manifest = _megatron_job(corpus, out, tiny_model, "--shard_size_mb", "0.02")
    ours = [doc for shard in manifest["shards"] for doc in _read_prefix(str(out / shard["path"]))]
    texts = [json.loads(line)["text"] for line in joined.read_bytes().splitlines()]
    assert len(theirs) == len(texts)
    kept = [text.strip() != "" for text in texts]
    want = [doc for doc, keep in zip(theirs, kept, strict=True) if keep]
    assert len(ours) == len(want) == len(texts) - 3  # 3 whitespace-only texts
    for i, (a, b) in enumerate(zip(ours, want, strict=True)):
        assert a.dtype == b.dtype and np.array_equal(a, b), f"document {i}"
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    for text, doc, keep in zip(texts, theirs, kept, strict=True):
        if not keep:  # what preprocess_data.py writes for a whitespace-only text, and we leave out
            assert doc.tolist() == sp.encode(text) + [sp.eos_id()]
