"""`pile-pipeline show`: the tokenizer comes from the manifest when reachable; a given one must match it."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import sentencepiece as spm
from corpus_helpers import FAST_BEAM

from pipeline.cli import run, show
from pipeline.startup import native_stderr

REPO = Path(__file__).resolve().parents[1]
OTHER_MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")


@pytest.fixture(scope="module")
def output(tmp_path_factory, tiny_model):
    """An output made with a copy of the tiny model, and that copy (which tests may remove)."""
    root = tmp_path_factory.mktemp("show")
    model = root / "model" / "tiny.model"
    model.parent.mkdir()
    shutil.copy(tiny_model, model)
    out = root / "out"
    run.main(["--input", str(REPO / "sample_data" / "notes" / "part-00.jsonl"), "--output_dir", str(out),
              "--tokenizer_model", str(model), "--text_key", "body", "--subset_key", "source.name",
              "--subset_names", "any", "--default_subset", "misc", "--seq_len", "64", *FAST_BEAM])
    return out, model


@pytest.mark.slow
def test_show_takes_the_tokenizer_the_manifest_records(output, capsys):
    out, model = output
    assert show.cli([str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"tokenizer: {model}, from the manifest (sha256 matches)" in printed
    assert "sequence 0 detokenized (64 tokens" in printed


@pytest.mark.slow
def test_a_given_model_with_another_sha256_is_refused_naming_both(output, capsys):
    out, model = output
    assert show.cli([str(out), "--tokenizer_model", OTHER_MODEL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"error: --tokenizer_model {OTHER_MODEL}: sha256 ") and str(model) in err[0]
    assert spm.SentencePieceProcessor(model_file=OTHER_MODEL).get_piece_size() > 0  # a valid model, only not this one


@pytest.mark.slow
def test_a_given_model_that_matches_is_used(output, tiny_model, capsys):
    out, _ = output
    assert show.cli([str(out), "--tokenizer_model", tiny_model]) == 0
    assert f"tokenizer: {tiny_model} (sha256 matches the manifest)" in capsys.readouterr().out


@pytest.mark.slow
def test_without_a_reachable_model_the_ids_are_shown(output, tmp_path, capsys):
    out, model = output
    moved = tmp_path / "elsewhere.model"
    shutil.move(model, moved)
    try:
        assert show.cli([str(out)]) == 0
    finally:
        shutil.move(moved, model)
    printed = capsys.readouterr().out
    assert f"the recorded model {model} is not reachable from here" in printed
    assert "first 64 ids: [" in printed


@pytest.mark.slow
def test_show_prints_no_tensorflow_start_up_notices(output):
    out, _ = output
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", "show", str(out)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "sequence 0 detokenized" in result.stdout
    assert result.stderr == ""  # no oneDNN, CUDA driver, cuInit or absl notices


NOISE = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
         "I0000 00:00:1 port.cc:153] oneDNN custom operations are on. You may see ...\n"
         "E0000 00:00:1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n")
REAL = "E0000 00:00:1 op_kernel.cc:1] OP_REQUIRES failed: NOT_FOUND: shard.tfrecord\n"


def _written_to_fd_2_inside_the_filter() -> str:
    fd, path = tempfile.mkstemp()
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        with native_stderr.quiet_native_notices():
            os.write(2, (NOISE + REAL).encode())
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("level", ["1", "2", "3", None])
def test_the_filter_keeps_every_other_line_native_code_writes(monkeypatch, level):
    # The filter's switch is TensorFlow's own variable: this test sets it, whatever the caller's shell holds.
    if level is None:  # unset: TensorFlow logs everything, and so the filter lets everything through
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
    assert native_stderr.keep(NOISE + REAL) == REAL
    assert _written_to_fd_2_inside_the_filter() == (REAL if level else NOISE + REAL)


def test_tensorflows_logs_asked_for_pass_the_filter(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert _written_to_fd_2_inside_the_filter() == NOISE + REAL


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", ["1000000", "0"])
def test_a_batch_the_output_cannot_fill_names_the_flag(output, capsys, batch_size):
    out, _ = output
    assert show.cli([str(out), "--batch_size", batch_size]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --batch_size {batch_size}: the output holds ") and err.count("\n") == 1


@pytest.mark.slow
def test_without_the_summary_only_the_batch_is_printed(output, capsys):
    out, _ = output
    assert show.cli([str(out), "--summary", "false"]) == 0
    printed = capsys.readouterr().out
    assert "sequence 0 detokenized" in printed and "subset" not in printed and "total" not in printed
    assert show.cli([str(out)]) == 0
    assert capsys.readouterr().out.count("\ntotal ") == 1
