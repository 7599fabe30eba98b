"""A corpus whose lines keep their text or subset elsewhere than the flags say is refused before the
job starts (its first lines are read), with exit status 2 and one line naming the flag and the
keys the lines do have; a corpus with some broken lines among good ones still runs.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from corpus_helpers import pile_line, write_lines
from fault_helpers import IN_MEMORY, MODEL, command, problem_lines

pytestmark = pytest.mark.slow


def _corpus(folder, lines: list[bytes], files: int = 2) -> str:
    for f in range(files):
        write_lines(str(folder / f"{f:02d}.jsonl.zst"), lines)
    return str(folder / "*.jsonl.zst")


def _run(tmp_path, inputs, *flags):
    out = tmp_path / "out"
    start = time.monotonic()
    proc = command("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                   *IN_MEMORY, *flags)
    return proc, time.monotonic() - start, out


OTHER_LAYOUT = [json.dumps({"body": f"document {i} " + "words " * 20, "source": {"name": "web"}}).encode()
                for i in range(200)]


@pytest.mark.parametrize("flags, words", [
    ((), ["--text_key 'text'", "their keys: body, source", "00.jsonl.zst", "and 1 more file"]),
    (("--text_key", "body"), ["--subset_key 'meta.pile_set_name'", "their keys: body, source", "--default_subset"]),
    (("--text_key", "body", "--subset_key", "source.name"), ["--subset_names pile", "'web'", "--subset_names any"]),
    (("--text_key", "doc.body"), ["--text_key 'doc.body'", "their keys: body, source"]),
    (("--text_key", "body", "--subset_key", "source.title"), ["--subset_key 'source.title'",
                                                              "their keys: source.name"]),
])
def test_another_layout_is_refused_before_the_job_with_a_hint(tmp_path, flags, words):
    proc, _, out = _run(tmp_path, _corpus(tmp_path / "in", OTHER_LAYOUT), *flags)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = problem_lines(proc.stderr)
    assert all(w in line for w in words), line
    assert not out.exists() or not os.listdir(out)
    assert "input files ->" not in proc.stderr  # the job never started


def test_the_right_flags_run(tmp_path):
    proc, _, out = _run(tmp_path, _corpus(tmp_path / "in", OTHER_LAYOUT, files=1), "--text_key", "body",
                        "--subset_key", "source.name", "--subset_names", "any")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "manifest.json").exists()


def test_broken_lines_among_good_ones_are_the_jobs_dead_letters(tmp_path):
    good = [pile_line(f"document {i} " + "words " * 20, "Wikipedia (en)") for i in range(200)]
    lines = [b'{"body": "no text key"}'] * 5 + good
    proc, _, out = _run(tmp_path, _corpus(tmp_path / "in", lines, files=1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "manifest.json").read_text())["dead_letters"]["by_reason"] == {"text_missing": 5}


def _columnar(path, column) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": column, "id": pa.array(range(len(column)))}), path)
    return str(path)


def _refused_naming(proc, out, *words):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = problem_lines(proc.stderr)
    assert all(w in line for w in words), line
    assert not out.exists() or not os.listdir(out)
    return line


def test_a_text_key_holding_an_object_is_refused_naming_what_it_holds(tmp_path):
    """`--text_key meta` exists in every line but holds an object: the job ran, then exit 1 with a traceback."""
    proc, _, out = _run(tmp_path, _corpus(tmp_path / "in", [pile_line(f"doc {i} " * 9) for i in range(80)]),
                        "--text_key", "meta")
    _refused_naming(proc, out, "--text_key 'meta': in the first 64 line(s) of", "00.jsonl.zst", "it holds an object",
                    "not a text (a string)", "a field inside it: meta.pile_set_name")


@pytest.mark.parametrize("column, holds", [([1, 2, 3], "a number"), ([None, None], "null"),
                                           ([["a", "b"], ["c"]], "a list"), ([{"t": "x"}], "an object")])
def test_a_parquet_text_column_of_another_type_is_refused(tmp_path, column, holds):
    import pyarrow as pa

    array = pa.array(column, pa.string()) if column == [None, None] else pa.array(column)
    path = _columnar(tmp_path / "rows.parquet", array)
    proc, _, out = _run(tmp_path, path, "--subset_names", "any", "--default_subset", "web")
    _refused_naming(proc, out, f"--text_key 'text': in the first {len(column)} row(s) of {path} it holds {holds}")


def test_inputs_without_a_line_or_row_are_refused(tmp_path):
    import pyarrow as pa

    empty = _columnar(tmp_path / "none.parquet", pa.array([], pa.string()))
    (tmp_path / "none.jsonl").write_bytes(b"")
    proc, _, out = _run(tmp_path, empty, "--subset_names", "any", "--default_subset", "web")
    _refused_naming(proc, out, "--input: every input is empty", "none.parquet")
    proc, _, out = _run(tmp_path, str(tmp_path / "none.*"), "--subset_names", "any", "--default_subset", "web")
    _refused_naming(proc, out, "--input: every input is empty", "none.jsonl", "none.parquet")


def test_a_subset_key_holding_numbers_is_refused_naming_what_it_holds(tmp_path):
    lines = [json.dumps({"text": f"doc {i} " * 9, "meta": {"pile_set_name": i}}).encode() for i in range(10)]
    proc, _, out = _run(tmp_path, _corpus(tmp_path / "in", lines, files=1))
    _refused_naming(proc, out, "--subset_key 'meta.pile_set_name': in the first 10 line(s)", "it holds a number")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "multi_processing"])
def test_a_job_that_still_fails_prints_one_line_and_no_traceback(tmp_path, mode):
    """--packing best_fit on documents that are all empty: the job runs and writes no records (exit 1)."""
    path = tmp_path / "empty_docs.jsonl"
    path.write_bytes(b'{"text": ""}\n{"text": "   "}\n' * 5)
    flags = [] if mode == "default" else ["--runner", "DirectRunner", "--direct_running_mode", mode,
                                          "--direct_num_workers", "2"]
    out = tmp_path / "out"
    proc = command("--input", str(path), "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                   "--subset_names", "any", "--default_subset", "web", "--packing", "best_fit", *flags)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-5000:]
    (line,) = problem_lines(proc.stderr)
    assert "the job wrote no records: 10 lines read" in line and "empty_text: 10" in line
