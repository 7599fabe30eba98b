"""The tokenizer backends inside the pipeline: identical shards, fallback, full verification."""

import json
import os
import sys

import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM, pile_line, run_free, write_lines
from test_backends import FAST, _fuzz, _train, _WrongOnDigits

from pipeline.cli import run
from pipeline.config.job import PipelineConfig
from pipeline.tokenize import engines, self_check
from pipeline.tokenize.kinds import sp_model
from pipeline.tokenize.model import BackendChoice

SEQ = 64


def _texts() -> list[str]:
    return self_check.adversarial_texts(long_line=20_000) + _fuzz(5, 150) + [
        "Plain words and a literal <s> and </s> and <unk> inside a document.",
        "digits 1234567890 3.14159 and 数据模型 日本語 🚀 مرحبا",
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("backend_corpus")
    texts = [t for t in _texts() if t.strip()]  # whitespace-only text is filtered before tokenizing
    subsets = ["Pile-CC", "Github", "ArXiv"]
    for f in range(2):
        lines = [pile_line(t, subsets[i % 3]) for i, t in enumerate(texts[f::2])]
        write_lines(str(root / f"{f:02d}.jsonl.zst"), lines)
    return str(root / "*.jsonl.zst")


def _run(corpus, out, model, *extra):
    argv = ["--input", corpus, "--output_dir", str(out), "--tokenizer_model", model, "--seq_len", str(SEQ),
            "--document_boundaries", "--epochs", "Github=1.5,ArXiv=2", "--chunk_mb", "0.05", *extra, *FAST_BEAM]
    return run.main(argv)


def _content(manifest: dict) -> dict:
    """The manifest without what names the backend."""
    out = json.loads(json.dumps(manifest))
    del out["tokenizer"]["backend"], out["config"]["tokenizer_backend"], out["created_by"]
    return out


@pytest.fixture(scope="module")
def sentencepiece_run(corpus, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("sp_out")
    return out, _run(corpus, out, tiny_model, "--tokenizer_backend", "sentencepiece")


@pytest.mark.slow
@pytest.mark.parametrize("backend", [*FAST, "auto"])
def test_shards_are_byte_identical_across_backends(backend, corpus, tiny_model, sentencepiece_run, tmp_path):
    sp_out, sp_manifest = sentencepiece_run
    manifest = _run(corpus, tmp_path / "out", tiny_model, "--tokenizer_backend", backend)
    assert run_free(manifest["shards"]) == run_free(sp_manifest["shards"]) and len(manifest["shards"]) >= 1
    for shard, sp_shard in zip(manifest["shards"], sp_manifest["shards"], strict=True):
        with open(os.path.join(tmp_path / "out", shard["path"]), "rb") as a, open(os.path.join(sp_out,
                                                                                                sp_shard["path"]),
                                                                                   "rb") as b:
            assert a.read() == b.read()
    assert run_free(_content(manifest)) == run_free(_content(sp_manifest))
    recorded = manifest["tokenizer"]["backend"]
    if backend != "auto" or engines.package_version("gigatoken") or engines.package_version("kitoken"):
        assert recorded["name"] in engines.FAST_BACKENDS
        assert recorded["version"] == engines.package_version(recorded["name"])
        assert recorded["parity"]["result"] == "passed" and recorded["parity"]["mismatches"] == 0
        assert recorded["parity"]["documents"] > 0
    assert sp_manifest["tokenizer"]["backend"] == {"name": "sentencepiece", "parity": {},
                                                   "version": spm.__version__}


@pytest.mark.slow
@pytest.mark.parametrize("backend", FAST[:1])  # gigatoken: the engine that takes batched calls
def test_small_files_taken_in_groups_by_two_threads_give_the_same_shards(backend, tiny_model, tmp_path,
                                                                         monkeypatch):
    """Many small files on two worker threads: queued in groups tokenized in shared calls, same bytes."""
    from pipeline.beam.runners.direct import profile as direct_profile
    from pipeline.beam.runners.direct import read as direct_read

    texts = [t for t in _texts() if t.strip()]
    for f in range(24):
        write_lines(str(tmp_path / "in" / f"{f:02d}.jsonl.zst"), [pile_line(t) for t in texts[f::24]])
    corpus = str(tmp_path / "in" / "*.jsonl.zst")
    sp = _run(corpus, tmp_path / "sp", tiny_model, "--tokenizer_backend", "sentencepiece")
    monkeypatch.setattr(direct_profile, "ENCODE_BATCH_BYTES", 32 << 10)
    planned, on_queue = [], direct_read.on_queue
    monkeypatch.setattr(direct_read, "on_queue", lambda *a, **k: planned.append(on_queue(*a, **k)) or planned[-1])
    manifest = run.main(["--input", corpus, "--output_dir", str(tmp_path / "fast"), "--tokenizer_model", tiny_model,
                         "--seq_len", str(SEQ), "--document_boundaries", "--epochs", "Github=1.5,ArXiv=2",
                         "--chunk_mb", "0.05", "--tokenizer_backend", backend, "--runner", "DirectRunner",
                         "--direct_num_workers", "2", "--direct_running_mode", "multi_threading"])
    groups = [u[3].group for w, u in planned[0] if w == 0 and len(u) > 3]
    assert len(set(groups)) < len(groups) - 2  # some groups hold several files
    assert run_free(_content(manifest)) == run_free(_content(sp))
    for shard, sp_shard in zip(manifest["shards"], sp["shards"], strict=True):
        assert (tmp_path / "fast" / shard["path"]).read_bytes() == (tmp_path / "sp" / sp_shard["path"]).read_bytes()


@pytest.mark.slow
def test_auto_without_fast_backends_runs_on_sentencepiece(corpus, tiny_model, sentencepiece_run, tmp_path,
                                                          monkeypatch):
    for name in ("gigatoken", "kitoken", "awkward"):
        monkeypatch.setitem(sys.modules, name, None)
    manifest = _run(corpus, tmp_path / "out", tiny_model, "--tokenizer_backend", "auto")
    recorded = manifest["tokenizer"]["backend"]
    assert recorded["name"] == "sentencepiece" and recorded["parity"]["result"] == "fallback"
    assert "not installed" in recorded["parity"]["reason"]
    assert run_free(manifest["shards"]) == run_free(sentencepiece_run[1]["shards"])


@pytest.mark.slow
def test_auto_with_an_unsupported_model_runs_on_sentencepiece(corpus, tmp_path):
    model = _train(tmp_path / "nfkc", normalization_rule_name="nmt_nfkc")
    manifest = _run(corpus, tmp_path / "out", model, "--tokenizer_backend", "auto")
    recorded = manifest["tokenizer"]["backend"]
    assert recorded["name"] == "sentencepiece" and "nmt_nfkc" in recorded["parity"]["reason"]


@pytest.fixture
def wrong_backend(monkeypatch):
    """A "kitoken" that gets documents with "123" wrong, chosen without a self-check."""
    from pipeline.beam import preflight

    monkeypatch.setitem(engines._ENGINES, "kitoken", _WrongOnDigits)
    monkeypatch.setattr(sp_model, "model_problems", lambda backend, facts: [])
    monkeypatch.setattr(preflight, "choose_backend",
                        lambda *args, **kwargs: BackendChoice("kitoken", "test", {"result": "passed"}))


@pytest.mark.slow
def test_verification_dead_letters_mismatches_and_counts_add_up(wrong_backend, tiny_model, tmp_path):
    texts = [f"document {i} " + ("with 123" if i % 5 == 0 else "without digits") for i in range(40)]
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line(t) for t in texts])
    manifest = _run(path, tmp_path / "out", tiny_model, "--tokenizer_backend", "kitoken", "--verify_tokenizer",
                    "--max_dead_letter_fraction", "1")
    dead = manifest["dead_letters"]
    assert dead["by_reason"] == {"tokenizer_mismatch": 8} and dead["records"] == 8
    (dl_file,) = dead["files"]
    records = [json.loads(line) for line in open(tmp_path / "out" / dl_file["path"], encoding="utf-8")]
    assert [r["line"] for r in records] == [i + 1 for i in range(40) if i % 5 == 0]
    assert all(r["reason"] == "tokenizer_mismatch" and "kitoken ids differ" in r["detail"] for r in records)
    s = manifest["subsets"]["Pile-CC"]
    assert manifest["totals"]["lines"] == 40 == s["documents"] + dead["records"]
    assert s["kept"] == 32 == s["documents"]
    sp = spm.SentencePieceProcessor(model_file=tiny_model)
    assert s["tokens"] == sum(len(sp.encode(t)) + 1 for i, t in enumerate(texts) if i % 5)
    assert manifest["config"]["verify_tokenizer"] == "dead_letter"


@pytest.mark.slow
def test_verification_can_fail_the_job(wrong_backend, tiny_model, tmp_path):
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line("fine"), pile_line("bad 123")])
    with pytest.raises(Exception, match="line 2: kitoken ids differ"):
        _run(path, tmp_path / "out", tiny_model, "--tokenizer_backend", "kitoken", "--verify_tokenizer", "fail")


@pytest.mark.slow
def test_without_verification_the_wrong_ids_go_through(wrong_backend, tiny_model, tmp_path):
    """What the verification mode is for: the self-check samples; only verification sees every document."""
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line("fine"), pile_line("bad 123")])
    manifest = _run(path, tmp_path / "out", tiny_model, "--tokenizer_backend", "kitoken")
    assert manifest["dead_letters"]["records"] == 0


def test_backend_flags(tiny_model):
    config, _ = run.parse_args(["--input", "x", "--output_dir", "o", "--tokenizer_model", "m", "--verify_tokenizer"])
    assert config.verify_tokenizer == "dead_letter" and config.tokenizer_backend is None  # the kind's reference
    from pipeline.beam.preflight import requested_backend

    assert requested_backend(config, "sentencepiece") == "sentencepiece"
    assert requested_backend(config, "huggingface") == "tokenizers"
    config, _ = run.parse_args(["--input", "x", "--output_dir", "o", "--tokenizer_model", "m",
                                "--tokenizer_backend", "gigatoken", "--verify_tokenizer", "fail"])
    assert (config.tokenizer_backend, config.verify_tokenizer) == ("gigatoken", "fail")
    with pytest.raises(ValueError, match="--verify_tokenizer"):
        PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m", verify_tokenizer="yes")
    with pytest.raises(ValueError, match="--tokenizer_backend"):
        PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m", tokenizer_backend="nonsense")
    wrong_kind = PipelineConfig(inputs=("x",), output_dir="o", tokenizer_model="m", tokenizer_backend="tiktoken")
    with pytest.raises(ValueError, match="--tokenizer_backend tiktoken does not apply to a sentencepiece tokenizer"):
        requested_backend(wrong_kind, "sentencepiece")
