"""The command line refuses mistakes with exit status 2 and one line naming the flag; nothing is written."""

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import run
from pipeline.core.options import UsageError

REPO = Path(__file__).resolve().parents[1]
MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")
TRAIN = REPO / "sample_data" / "pile" / "train"


def _args(out, *extra):
    return ["--input", str(TRAIN / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model", MODEL, *extra]


@pytest.mark.parametrize("extra,message", [
    (["--seq_lenn", "128"], r"unknown flag --seq_lenn \(did you mean --seq_len\?\)"),
    (["--runer", "DirectRunner"], r"unknown flag --runer \(did you mean --runner\?\)"),
    (["--seq_len", "abc"], r"--seq_len"),
    (["--epochs", "Books3=abc"], r"--epochs: 'abc' is not a number"),
    (["--subsets", "Books4"], r"--subsets: unknown Pile subset"),
    (["--remainder", "keep"], r"--remainder"),
    (["--add_eos", "maybe"], r"--add_eos: expected true or false"),
])
def test_a_bad_flag_is_refused_naming_it(tmp_path, extra, message):
    with pytest.raises(UsageError, match=message):
        run.parse_args(_args(tmp_path / "out", *extra))


def test_all_missing_required_flags_are_reported_at_once():
    with pytest.raises(UsageError, match="missing required flags: --input, --output_dir, --tokenizer_model"):
        run.parse_args([])


def test_a_shell_expanded_glob_is_taken_whole_after_one_input(tmp_path):
    files = sorted(str(p) for p in TRAIN.glob("*.jsonl.zst"))
    config, _ = run.parse_args(["--input", *files, "--output_dir", str(tmp_path), "--tokenizer_model", MODEL])
    assert list(config.inputs) == files


def test_a_stray_argument_is_refused_with_a_hint_to_quote_the_glob(tmp_path):
    with pytest.raises(UsageError, match="unexpected argument .*quote glob patterns"):
        run.parse_args(_args(tmp_path, "--tokenizer_model", MODEL, "tokenizers/sample/sample.vocab"))


def test_config_file_keys_are_checked_like_flags(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('[pipeline]\nseq_lenn = 128\n')
    with pytest.raises(UsageError, match=r"no option 'seq_lenn' \(did you mean --seq_len\?\)"):
        run.parse_args(["--config", str(config), *_args(tmp_path / "out")])
    config.write_text('[beam]\nrunerr = "DirectRunner"\n')
    with pytest.raises(UsageError, match="unknown flag --runerr"):
        run.parse_args(["--config", str(config), *_args(tmp_path / "out")])
    config.write_text('[pipeline]\nseq_len = 96\nadd_bos = true\n[beam]\ndirect_num_workers = 1\n')
    parsed, beam_args = run.parse_args(["--config", str(config), *_args(tmp_path / "out"), "--seq_len", "64"])
    assert parsed.seq_len == 64 and parsed.add_bos and beam_args == ["--direct_num_workers=1"]


def test_the_command_exits_2_with_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "pipeline.run", *_args(out, "--seq_lenn", "128")],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line or "Traceback" in line]
    assert len(errors) == 1 and "did you mean --seq_len" in errors[0]
    assert not out.exists()


def test_pile_pipeline_dispatches_to_each_command():
    result = subprocess.run([sys.executable, "-m", "pipeline.cli.main"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "train-tokenizer" in result.stdout
    for command in ("run", "show", "train-tokenizer", "tokenizer-report"):
        result = subprocess.run([sys.executable, "-m", "pipeline.cli.main", command, "--help"], cwd=REPO,
                                capture_output=True, text=True)
        assert result.returncode == 0 and "usage: pile-pipeline" in result.stdout, command
