"""Shared fixtures: a tiny SentencePiece model and Pile-format corpora written by the tests.

The suite runs in scripts/test.sh's environment whatever the caller's shell holds: a missing fast
tokenizer engine fails its parity tests rather than skipping them (PILE_REQUIRE_FAST_BACKENDS), and
TensorFlow's start-up notices are off (TF_CPP_MIN_LOG_LEVEL). A test that needs another value sets
it itself (monkeypatch).
"""

from __future__ import annotations

import json
import os
import random

import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM  # re-exported for tests; the stores' job runs with it
from sample_corpus import compose_lines
from tiers import pytest_runtest_makereport, pytest_runtest_setup  # noqa: F401  (the tiers' check)

# Before any test module is imported: some read these at import time.
os.environ.setdefault("PILE_REQUIRE_FAST_BACKENDS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A 600-piece BPE model with identity normalization, so decode(encode(text)) == text."""
    out = tmp_path_factory.mktemp("spm")
    rng = random.Random(7)
    texts = [json.loads(line)["text"] for line in compose_lines(rng, 300)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_prefix=str(out / "tiny"),
        vocab_size=600,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        character_coverage=0.9995,
        max_sentence_length=1 << 20,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    return str(out / "tiny.model")


@pytest.fixture(scope="session")
def no_eos_model(tmp_path_factory) -> str:
    """A model without an EOS piece (to check the clear error)."""
    out = tmp_path_factory.mktemp("spm_noeos")
    texts = [json.loads(line)["text"] for line in compose_lines(random.Random(3), 80)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=str(out / "noeos"), vocab_size=600, model_type="bpe",
        byte_fallback=True, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, minloglevel=2, num_threads=1,
    )
    return str(out / "noeos.model")


@pytest.fixture(scope="session")
def doc_stores(tmp_path_factory, tiny_model) -> tuple[str, str]:
    """Two document stores written by the job (`--output_format megatron --provenance`), once per session.

    Store A: ~80 documents of one train file, in several .bin/.idx pairs; store B: the val file.
    """
    from sample_corpus import write_sample_corpus

    from pipeline.cli import run

    root = tmp_path_factory.mktemp("store_corpus")
    write_sample_corpus(str(root), train_files=1, docs_per_file=80)
    out = []
    for name, pattern in (("a", "train/*.jsonl.zst"), ("b", "val.jsonl.zst")):
        target = tmp_path_factory.mktemp(f"store_{name}") / "out"
        run.main(["--input", str(root / pattern), "--output_dir", str(target), "--tokenizer_model", tiny_model,
                  "--output_format", "megatron", "--shard_size_mb", "0.02", "--provenance", *FAST_BEAM])
        out.append(str(target))
    return out[0], out[1]
