"""A job whose output nobody should use fails, writes no manifest, and points at its dead letters.

No records at all (every line dead-lettered, CR-only line endings, every document filtered) always
fails; so does a share of dead letters above --max_dead_letter_fraction (default 5%), unless told a
larger one. The dead letters are still written, in the run's directory, for the user to look at;
without a manifest every reader refuses the output.
"""

from __future__ import annotations

import json

import pytest
from corpus_helpers import pile_line, write_lines
from fault_helpers import IN_MEMORY, MODEL, command, problem_lines

from pipeline.cli import run
from pipeline.format.manifest import ManifestError


def _job(path, out, *extra):
    return ["--input", str(path), "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32", *extra,
            *IN_MEMORY]


def _dead_letters(out) -> list[dict]:
    (run_dir,) = out.glob("run-*")
    return [json.loads(line) for f in sorted(run_dir.glob("dead_letters/*.jsonl")) for line in f.open()]


def _refused(out) -> None:
    from pipeline import tfdata

    assert not (out / "manifest.json").exists()
    with pytest.raises(ManifestError, match="No manifest"):
        tfdata.make_dataset(str(out), batch_size=1, shuffle=False)


@pytest.mark.slow
def test_no_records_exits_1_pointing_at_the_dead_letters(tmp_path):
    path = write_lines(str(tmp_path / "in.jsonl.zst"), [b"{not json", b'{"text": 5}', b"[]"])
    out = tmp_path / "out"
    proc = command(*_job(path, out))
    assert proc.returncode == 1
    (line,) = problem_lines(proc.stderr)
    (run_dir,) = out.glob("run-*")
    assert (f"the job wrote no records: 3 lines read, 3 dead letters (invalid_json: 1, not_an_object: 1, "
            f"text_not_string: 1; see {run_dir}/dead_letters/)") in line
    assert "No manifest was written" in line
    assert [d["line"] for d in _dead_letters(out)] == [1, 2, 3]
    _refused(out)


@pytest.mark.slow
def test_cr_only_line_endings_are_one_bad_line_and_no_records(tmp_path):
    path = tmp_path / "mac.jsonl"
    path.write_bytes(b"\r".join(pile_line(f"doc {i}") for i in range(5)) + b"\r")
    out = tmp_path / "out"
    with pytest.raises(Exception, match="the job wrote no records: 1 lines read, 1 dead letters"):
        run.main(_job(path, out))
    _refused(out)


@pytest.mark.slow
def test_every_document_filtered_is_no_records_either(tmp_path):
    path = write_lines(str(tmp_path / "in.jsonl.zst"), [pile_line(f"book {i}", "Books3") for i in range(5)])
    with pytest.raises(Exception, match="no records: 5 lines read, 0 dead letters .*filtered: subset_not_selected: 5"):
        run.main(_job(path, tmp_path / "out", "--subsets", "uncopyrighted"))
    _refused(tmp_path / "out")


@pytest.fixture
def six_percent_bad(tmp_path):
    lines = [pile_line(f"good document {i} " * 10) for i in range(94)] + [b"{broken"] * 6
    return write_lines(str(tmp_path / "in.jsonl.zst"), lines)


@pytest.mark.slow
def test_too_many_dead_letters_fail_the_job(six_percent_bad, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(Exception, match=r"6 of 100 lines \(6\.0%\) are dead letters \(invalid_json: 6\), more than "
                                        r"--max_dead_letter_fraction 0\.05: see .*/dead_letters/\. No manifest"):
        run.main(_job(six_percent_bad, out))
    assert len(_dead_letters(out)) == 6
    _refused(out)


@pytest.mark.slow
def test_a_larger_threshold_accepts_them(six_percent_bad, tmp_path):
    manifest = run.main(_job(six_percent_bad, tmp_path / "out", "--max_dead_letter_fraction", "0.06"))
    assert manifest["dead_letters"]["records"] == 6 and manifest["totals"]["records"] > 0


@pytest.mark.slow
def test_a_rerun_after_a_refused_output_needs_overwrite_and_clears_it(six_percent_bad, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(Exception, match="more than --max_dead_letter_fraction"):
        run.main(_job(six_percent_bad, out))
    with pytest.raises(FileExistsError, match="a run that did not finish.*--resume"):
        run.main(_job(six_percent_bad, out, "--max_dead_letter_fraction", "1"))
    manifest = run.main(_job(six_percent_bad, out, "--max_dead_letter_fraction", "1", "--overwrite"))
    assert sorted(p.name for p in out.iterdir()) == ["dataset_info.json", "features.json", "manifest.json",
                                                     f"run-{manifest['run_id']}"]


@pytest.mark.parametrize("value", ["-0.1", "1.5"])
def test_the_threshold_is_a_fraction(value, tmp_path):
    with pytest.raises(ValueError, match=rf"^--max_dead_letter_fraction {value} is (below 0|above 1): a share of the "
                       r"lines, within \[0, 1\]$"):
        run.parse_args(_job("x", tmp_path, "--max_dead_letter_fraction", value))
