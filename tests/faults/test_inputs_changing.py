"""An input that changes while the job reads it (truncated, appended to, replaced) fails the job
with one line naming the file, and no manifest: never a partial or mixed output with exit 0.

Each input's size and modification time (ETag on object stores) are recorded when the job starts
and compared before and after each file is read. The job is frozen as it starts reading the file,
the file is changed, and the job is let go.
"""

from __future__ import annotations

import gzip
import os

import pytest
import zstandard
from corpus_helpers import pile_line, write_lines
from fault_helpers import IN_MEMORY, MODEL, Job, problem_lines

pytestmark = pytest.mark.slow

DOCS = 2405


def _lines(n: int, start: int = 0) -> list[bytes]:
    return [pile_line(f"document {i} " + "some words to tokenize here " * 20, "Wikipedia (en)")
            for i in range(start, start + n)]


def _compress(data: bytes, compression: str) -> bytes:
    if compression == "zst":
        return zstandard.ZstdCompressor().compress(data)
    if compression == "gz":
        return gzip.compress(data)
    return data


def _change(path: str, how: str, compression: str) -> None:
    if how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 3)
    elif how == "append":
        extra = b"\n".join(_lines(100, start=DOCS)) + b"\n"
        with open(path, "ab") as f:
            f.write(_compress(extra, compression))  # zstd frames and gzip members concatenate
    else:  # replaced by another file of the same size
        data = open(path, "rb").read()
        os.remove(path)
        with open(path, "wb") as f:
            f.write(data)


@pytest.mark.parametrize("compression", ["plain", "zst", "gz"])
@pytest.mark.parametrize("how", ["truncate", "append", "replace"])
@pytest.mark.parametrize("when", ["after launch", "mid-read"])
def test_an_input_changed_while_the_job_runs_fails_it_naming_it(tmp_path, compression, how, when):
    """After launch: before the file is opened. Mid-read: small chunks, so reading goes with tokenizing."""
    name = "in.jsonl" + ("" if compression == "plain" else f".{compression}")
    path = str(tmp_path / name)
    write_lines(path, _lines(DOCS), compression="" if compression == "plain" else compression)
    out = tmp_path / "out"
    job = Job("--input", path, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
              "--fan_out", "no", "--chunk_mb", "0.02", *IN_MEMORY)
    started = f"reading {path}" if when == "mid-read" else "input files ->"
    job.wait_until(lambda: started in job.output(), "the job starts")
    job.freeze()
    try:
        _change(path, how, compression)
    finally:
        job.thaw()
    status = job.finish()
    assert status == 1, job.output()[-3000:]
    line = problem_lines(job.output())[-1]
    assert f"{path} changed while the job read it" in line, line
    assert not (out / "manifest.json").exists()
