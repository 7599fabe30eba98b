"""What --resume takes up, what it refuses (one line, exit status 2, nothing removed), and what the flags around it do.

The run taken up here is one that failed at its very end (more dead letters than
--max_dead_letter_fraction: no manifest), so every work item is committed: rerun with a larger
fraction and --resume (an option that does not change a byte), it processes nothing again. A
change of an option that decides the bytes, of an input, of the code's output version is refused,
naming it; so are --resume with --overwrite and --resume on a finished output. Without --resume a
rerun is refused as before, now saying that --resume takes the run up; --overwrite starts again
and removes the work folder. --resume with nothing to resume runs from the start and says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from fault_helpers import command
from resume_helpers import WORK, committed, resumed_digests

from pipeline.cli import run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Two small files, a few malformed lines in the first (about 3% of its lines)."""
    root = tmp_path_factory.mktemp("corpus")
    for f in range(2):
        lines = [pile_line(f"document {f}-{i} " + "some words here " * (20 + i % 40), "Wikipedia (en)")
                 for i in range(150)]
        if f == 0:
            lines[10:10] = [b"{not json"] * 5
        write_lines(str(root / f"{f:02d}.jsonl.zst"), lines)
    return root


def _argv(corpus: Path, model: str, out: Path, *extra: str) -> list[str]:
    return ["--input", str(corpus / "*.jsonl.zst"), "--tokenizer_model", model, "--output_dir", str(out),
            "--seq_len", "64", "--chunk_mb", "0.02", *extra, *FAST_BEAM]


@pytest.fixture
def failed(corpus, tiny_model, tmp_path) -> Path:
    """An output whose run failed at its end (too many dead letters): its work folder holds every work item."""
    out = tmp_path / "out"
    code = command(*_argv(corpus, tiny_model, out, "--max_dead_letter_fraction", "0")).returncode
    assert code == 1 and not (out / "manifest.json").exists() and committed(out) > 0
    return out


def _refused(argv: list[str], *words: str) -> str:
    result = command(*argv)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert all(word in lines[-1] for word in words), lines[-1]
    return lines[-1]


def _untouched(out: Path, before: dict) -> None:
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def _state(out: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def test_a_free_option_changed_is_taken_up_and_nothing_is_processed_again(failed, corpus, tiny_model, tmp_path):
    chunks = committed(failed)
    manifest = run.main(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1", "--resume",
                              "--progress_every", "0"))
    assert manifest["resume"] == {"count": 1, "chunks_processed": 0, "chunks_reused": chunks}
    clean = tmp_path / "clean"
    run.main(_argv(corpus, tiny_model, clean, "--max_dead_letter_fraction", "1"))
    assert resumed_digests(failed) == resumed_digests(clean)
    assert not (failed / WORK).exists()


@pytest.mark.parametrize(("extra", "words"), [
    (["--seq_len", "32"], ("--resume refused", "--seq_len was 64, now 32")),
    (["--chunk_mb", "0.03"], ("--resume refused", "--chunk_mb was 0.02, now 0.03")),
    (["--dedup", "exact"], ("--resume refused", "--dedup was \"none\", now \"exact\"")),
])
def test_an_option_that_changes_the_bytes_is_refused_naming_it(failed, corpus, tiny_model, extra, words):
    before = _state(failed)
    _refused(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1", "--resume", *extra), *words)
    _untouched(failed, before)


def test_an_input_changed_since_the_run_is_refused_naming_it(failed, corpus, tiny_model):
    before = _state(failed)
    path = corpus / "01.jsonl.zst"
    stat = path.stat()
    try:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # touched: another mtime
        _refused(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1", "--resume"),
                 "--resume refused", f"input {path} changed since the run", "modification time")
    finally:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    _untouched(failed, before)


def test_another_output_version_of_the_code_is_refused(failed, corpus, tiny_model):
    job_file = failed / WORK / "job.json"
    job = json.loads(job_file.read_text())
    job["facts"]["code"]["output_version"] -= 1  # what an older version of the code wrote
    job_file.write_text(json.dumps(job))
    _refused(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1", "--resume"),
             "--resume refused", "the code's output differs (output_version")


def test_resume_with_overwrite_and_on_a_finished_output_are_refused(failed, corpus, tiny_model, tmp_path):
    _refused(_argv(corpus, tiny_model, failed, "--resume", "--overwrite"), "--resume with --overwrite")
    finished = tmp_path / "finished"
    run.main(_argv(corpus, tiny_model, finished, "--max_dead_letter_fraction", "1"))
    before = _state(finished)
    _refused(_argv(corpus, tiny_model, finished, "--max_dead_letter_fraction", "1", "--resume"),
             "--resume", "holds a finished output", "nothing to resume")
    _untouched(finished, before)


@pytest.mark.parametrize(("extra", "words"), [
    (["--per_subset", "--subsets", "Wikipedia (en)"], "--per_subset TFRecord job"),
    (["--split_by", "language"], "--split_by job"),
], ids=["per_subset", "split_by"])
def test_resume_of_a_job_of_several_outputs_is_refused_naming_the_flag(corpus, tiny_model, tmp_path, extra, words):
    """One output per subset or bucket: nothing takes their parts up, so --resume says to start again."""
    _refused(_argv(corpus, tiny_model, tmp_path / "out", "--resume", *extra), "--resume does not take up", words,
             "--overwrite")
    assert not (tmp_path / "out").exists()


def test_without_resume_a_rerun_is_refused_and_overwrite_starts_again(failed, corpus, tiny_model):
    before = _state(failed)
    _refused(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1"), "did not finish",
             "Pass --resume to take it up")
    _untouched(failed, before)
    chunks = committed(failed)
    manifest = run.main(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1", "--overwrite"))
    assert manifest["resume"] == {"count": 0, "chunks_processed": chunks, "chunks_reused": 0}
    assert sorted(p.name for p in failed.iterdir()) == sorted(
        ["dataset_info.json", "features.json", "manifest.json", f"run-{manifest['run_id']}"])


def test_resume_with_nothing_to_resume_runs_from_the_start_and_says_so(corpus, tiny_model, tmp_path):
    out = tmp_path / "out"
    result = command(*_argv(corpus, tiny_model, out, "--max_dead_letter_fraction", "1", "--resume"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--resume: " in result.stderr and "holds no work of a run before" in result.stderr
    assert json.loads((out / "manifest.json").read_text())["resume"]["count"] == 0


def test_a_file_of_someone_elses_in_the_work_folder_is_refused_and_kept(failed, corpus, tiny_model):
    stranger = failed / WORK / "notes.txt"
    stranger.write_text("mine")
    before = _state(failed)
    for flag in ("--resume", "--overwrite"):
        _refused(_argv(corpus, tiny_model, failed, "--max_dead_letter_fraction", "1", flag), f"--{flag[2:]} refused",
                 ".resume/notes.txt")
    _untouched(failed, before)
