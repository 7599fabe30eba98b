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
