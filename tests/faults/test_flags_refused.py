"""Flags past a physical limit and unusable paths are refused before the job starts: exit status 2,
one line naming the flag, no traceback, nothing written.
"""

from __future__ import annotations

import os
import time

import pytest
from fault_helpers import MODEL, command, problem_lines, small_corpus


def _run(tmp_path, *flags, timeout: float = 120):
    """The command with a small corpus and `flags` (later flags win); (CompletedProcess, its one problem line)."""
    inputs = small_corpus(tmp_path / "in", files=1, docs=5)
    out = tmp_path / "out"
    start = time.monotonic()
    proc = command("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                   *flags, timeout=timeout)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert time.monotonic() - start < timeout
    (line,) = problem_lines(proc.stderr)
    assert not out.exists() or not os.listdir(out)
    return proc, line


@pytest.mark.slow
@pytest.mark.parametrize("value", ["1025", "4096"])
def test_a_max_line_beyond_zstds_window_is_refused(tmp_path, value):
    """zstd's largest window is 2 GiB, twice the longest line: --max_line_mb above 1024 cannot be read."""
    _, line = _run(tmp_path, "--max_line_mb", value)
    assert f"--max_line_mb {value} is above 1024" in line and "zstd" in line


def test_the_largest_max_line_is_allowed():
    from pipeline.io.decompress import MIB
    from pipeline.io.inputs import MAX_LINE_MB, max_window_bytes

    assert max_window_bytes(MAX_LINE_MB * MIB) == 2**31  # ZSTD_WINDOWLOG_MAX on 64-bit machines


@pytest.mark.slow
@pytest.mark.parametrize("model", ["/dev/zero", "", "folder", "fifo"])
def test_a_tokenizer_model_that_is_not_a_regular_file_is_refused_at_once(tmp_path, model):
    """/dev/zero was read whole until memory ran out; a folder or an empty path gave `[Errno 21]`."""
    if model == "folder":
        model = str(tmp_path)
    elif model == "fifo":
        model = str(tmp_path / "fifo")
        os.mkfifo(model)
    _, line = _run(tmp_path, "--tokenizer_model", model, timeout=60)
    assert f"--tokenizer_model {model!r}: " in line
    # A folder may hold a Hugging Face tokenizer.json; this one does not.
    assert any(why in line for why in ("not a regular file", "a directory without tokenizer.json",
                                       "the path is empty")), line


@pytest.mark.slow
def test_a_tokenizer_model_larger_than_the_bound_is_refused(tmp_path):
    big = tmp_path / "big.model"
    with open(big, "wb") as f:
        f.truncate((256 << 20) + 1)  # sparse: costs no disk
    _, line = _run(tmp_path, "--tokenizer_model", str(big))
    assert f"--tokenizer_model {str(big)!r}: is 268,435,457 bytes, more than the 268,435,456 read whole" in line


@pytest.mark.slow
def test_an_empty_output_dir_is_not_the_current_directory(tmp_path):
    _, line = _run(tmp_path, "--output_dir", "")
    assert "--output_dir is empty" in line


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--eos_id", "--bos_id"])
def test_a_negative_special_id_is_named_as_such(tmp_path, flag):
    """`--eos_id -3` said that the model has no EOS id (it has one)."""
    _, line = _run(tmp_path, flag, "-3", "--add_bos", "True")
    assert f"{flag} -3 is below 0: a token id is >= 0" in line and "has no" not in line


@pytest.mark.parametrize("flag", ["--max_line_mb", "--shard_size_mb", "--chunk_mb", "--max_dead_letter_fraction",
                                  "--progress_every", "--dedup_verify_jaccard"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_float_flag_that_is_not_finite_is_named(flag, value):
    """`--max_line_mb nan` said "cannot convert float NaN to integer", without the flag."""
    from pipeline.cli import run
    from pipeline.core.options import UsageError

    with pytest.raises(UsageError, match=f"^{flag} {value}: not a finite number$"):
        run.parse_args(["--input", "x", "--output_dir", "o", "--tokenizer_model", "m", f"{flag}={value}"])


@pytest.mark.slow
def test_a_non_finite_float_is_refused_by_the_command_naming_the_flag(tmp_path):
    _, line = _run(tmp_path, "--max_line_mb", "nan")
    assert "--max_line_mb nan: not a finite number" in line


@pytest.mark.slow
def test_a_tokenizer_model_that_refuses_reads_is_named(tmp_path):
    """/proc/self/mem is a regular file that refuses reads: "[Errno 22] Invalid argument", without the flag."""
    _, line = _run(tmp_path, "--tokenizer_model", "/proc/self/mem", timeout=60)
    assert "--tokenizer_model '/proc/self/mem': cannot be read (Invalid argument)" in line


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--eos_id", "--bos_id"])
def test_a_boundary_id_of_an_ordinary_token_needs_allow_text_eos(tmp_path, flag):
    """`--eos_id` set to an ordinary merged token was accepted: EOS indistinguishable from text."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=MODEL)
    ordinary = next(i for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i)
                                                                   or sp.is_byte(i)) and len(sp.id_to_piece(i)) > 2)
    _, line = _run(tmp_path, flag, str(ordinary), "--add_bos", "True")
    assert f"{flag} {ordinary}: {sp.id_to_piece(ordinary)!r} is an ordinary token of {MODEL}" in line
    assert "--allow_text_eos" in line
    control = next(i for i in range(sp.get_piece_size()) if sp.is_control(i))
    from pipeline.tokenize.model import TokenizerModel

    model = TokenizerModel.load(MODEL)
    role = flag[2:5]
    assert getattr(model.special_ids(add_bos=True, add_eos=True, **{f"{role}_id": control}), f"{role}_id") == control
    assert getattr(model.special_ids(add_bos=True, add_eos=True, allow_text=True, **{f"{role}_id": ordinary}),
                   f"{role}_id") == ordinary
