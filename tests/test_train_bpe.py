"""`train-tokenizer --kind bpe`: a GPT-NeoX-style byte-level BPE tokenizer.json that the job takes."""

from pathlib import Path

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM

from pipeline.cli import run
from pipeline.cli import train_tokenizer as train_cli
from pipeline.tokenize.kinds.detect import load_tokenizer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SAMPLE = str(REPO / "sample_data" / "pile" / "train" / "00.jsonl.zst")


def test_a_trained_bpe_directory_runs_through_the_job(tmp_path):
    prefix = tmp_path / "neox1k"
    card = train_cli.main(["--kind", "bpe", "--input", SAMPLE, "--sample_mb", "0.5", "--vocab_size", "1000",
                           "--model_prefix", str(prefix), *FAST_BEAM])
    assert sorted(p.name for p in prefix.iterdir()) == ["card.json", "tokenizer.json", "tokenizer_config.json"]
    tok = load_tokenizer(str(prefix))
    assert (tok.kind, tok.vocab_size, tok.eos_id, tok.pad_id) == ("huggingface", 1000, 0, 1)
    assert card["model"]["vocab_size"] == 1000 and card["trainer"]["kind"] == "bpe"
    text = "Byte-level: every byte, even \x00 and 数据, round-trips."
    assert tok.decode(tok.encode_one(text)) == text

    manifest = run.main(["--input", SAMPLE, "--output_dir", str(tmp_path / "out"), "--tokenizer_model", str(prefix),
                         "--seq_len", "64", "--output_format", "megatron", *FAST_BEAM])
    assert manifest["tokenizer"]["kind"] == "huggingface" and manifest["tokenizer"]["eos_id"] == 0
    bins = list((tmp_path / "out").rglob("*.bin"))
    tokens = np.concatenate([np.frombuffer(p.read_bytes(), np.uint16) for p in bins])
    assert tokens.max() < 1000 and (tokens == 0).sum() == manifest["totals"]["documents"]


def test_the_same_sample_gives_the_same_tokenizer(tmp_path):
    args = ["--kind", "bpe", "--input", SAMPLE, "--sample_mb", "0.2", "--vocab_size", "600", *FAST_BEAM]
    one = train_cli.main([*args, "--model_prefix", str(tmp_path / "a")])
    two = train_cli.main([*args, "--model_prefix", str(tmp_path / "b")])
    assert one["model"]["sha256"] == two["model"]["sha256"]
    assert train_cli.cli([*args, "--model_prefix", str(tmp_path / "a")]) == 2  # exists: --overwrite replaces it


def test_tokenizer_report_compares_kinds(tmp_path):
    from pipeline.cli import tokenizer_report

    prefix = tmp_path / "bpe"
    train_cli.main(["--kind", "bpe", "--input", SAMPLE, "--sample_mb", "0.3", "--vocab_size", "800",
                    "--model_prefix", str(prefix), *FAST_BEAM])
    sp_model = str(REPO / "tokenizers" / "sample" / "sample.model")
    report = tokenizer_report.main(["--tokenizer_model", sp_model, str(prefix), "--label", "sp", "bpe",
                                    "--input", SAMPLE, "--sample_mb_per_subset", "0.02",
                                    "--out", str(tmp_path / "r.png"), *FAST_BEAM])
    sp, bpe = report["results"]["sp"], report["results"]["bpe"]
    assert set(sp) == set(bpe) and len(sp) > 2
    tok = load_tokenizer(str(prefix))
    assert report["models"]["bpe"]["sha256"] == tok.sha256
    for name, row in bpe.items():
        assert row["byte_fallback_rate"] == 0.0 and row["bytes_per_token"] > 1
        assert name == "Pile mix" or row["tokens"] > 0
