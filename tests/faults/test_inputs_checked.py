"""Every input is checked before the job starts, and every problem is reported at once, in one line.

A pattern matching nothing, a folder, a dangling symlink, a symlink loop, a FIFO and a file its
user may not read: each would otherwise be skipped without a word or found by a worker mid-job.
The job runs without root's power to bypass file permissions, so the kernel really refuses the read.
"""

from __future__ import annotations

import os

import pytest
from corpus_helpers import pile_line, write_lines
from fault_helpers import MODEL, command, problem_lines

from pipeline.io import inputs


@pytest.fixture
def messy(tmp_path):
    """A folder with one good input and five that cannot be read, for different reasons."""
    d = tmp_path / "in"
    d.mkdir()
    write_lines(str(d / "00.jsonl.zst"), [pile_line("good")])
    (d / "01.jsonl.zst").mkdir()  # a folder the glob matches
    (d / "02.jsonl.zst").symlink_to(d / "gone.jsonl.zst")  # dangling
    (d / "03.jsonl.zst").symlink_to(d / "03.jsonl.zst")  # a loop
    os.mkfifo(d / "04.jsonl.zst")  # reading it would block for ever
    write_lines(str(d / "05.jsonl.zst"), [pile_line("secret")])
    (d / "05.jsonl.zst").chmod(0)  # nobody may read it
    return d


@pytest.mark.slow
def test_all_problems_are_reported_at_once_before_anything_runs(messy, tmp_path):
    out = tmp_path / "out"
    proc = command("--input", str(messy / "*.jsonl.zst"), "--input", str(messy / "missing-*.jsonl"),
                   "--output_dir", str(out), "--tokenizer_model", MODEL, as_a_user=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert "6 input problem(s): " in line
    for problem in (f"{messy}/01.jsonl.zst: is a folder, not a file",
                    f"{messy}/02.jsonl.zst: dangling symlink (to {messy}/gone.jsonl.zst)",
                    f"{messy}/03.jsonl.zst: symlink loop",
                    f"{messy}/04.jsonl.zst: not a regular file",
                    f"{messy}/05.jsonl.zst: cannot be read (Permission denied)",
                    f"'{messy}/missing-*.jsonl' matches nothing"):
        assert problem in line, problem
    assert "00.jsonl.zst" not in line  # the good one
    assert not out.exists()  # nothing was created or written


def test_only_regular_readable_files_are_returned(tmp_path):
    write_lines(str(tmp_path / "a.jsonl.zst"), [pile_line("x")])
    (tmp_path / "sub").mkdir()
    write_lines(str(tmp_path / "sub" / "b.jsonl.zst"), [pile_line("y")])
    assert inputs.expand_inputs([str(tmp_path / "**" / "*.jsonl.zst")]) == [str(tmp_path / "a.jsonl.zst"),
                                                                              str(tmp_path / "sub" / "b.jsonl.zst")]
    with pytest.raises(inputs.InputError, match="is a folder"):
        inputs.expand_inputs([str(tmp_path / "*")])


@pytest.mark.slow
def test_s3_folders_are_reported_too(s3):
    fs, _, bucket = s3
    fs.pipe_file(f"{bucket}/in/00.jsonl", pile_line("x") + b"\n")
    fs.pipe_file(f"{bucket}/in/nested/01.jsonl", pile_line("y") + b"\n")
    with pytest.raises(inputs.InputError, match=f"s3://{bucket}/in/nested: is a folder, not a file"):
        inputs.expand_inputs([f"s3://{bucket}/in/*"])
    assert inputs.expand_inputs([f"s3://{bucket}/in/*.jsonl"]) == [f"s3://{bucket}/in/00.jsonl"]
    with pytest.raises(inputs.InputError, match=f"No input files match 's3://{bucket}/none/\\*'"):
        inputs.expand_inputs([f"s3://{bucket}/none/*"])
