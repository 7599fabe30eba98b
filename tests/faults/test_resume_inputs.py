"""Every kind of work item is taken up by --resume without being read again: whole files, frames, row groups.

The run taken up failed at its very end (more dead letters than --max_dead_letter_fraction: no
manifest), so every work item is committed. Its inputs are of each kind a work item can be: a
JSON-lines file read whole (a work item's record says which chunks it held), an indexed .zst
file (its frames' chunks are in its index), a Parquet file of several row groups (each row group's
record), an Arrow file, a gzip file. The run that takes it up reads none of them: every work item
is `Done`, its chunks taken from the work folder, with the clean run's bytes and counts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.feather
import pyarrow.parquet as pq
import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines
from resume_helpers import resumed_digests

from pipeline.cli import run
from pipeline.io.frames import reframe

pytestmark = pytest.mark.slow

CHUNK_MB = 0.02


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("kinds")
    texts = [(f"document {i} " + "the words of the day " * (10 + i % 30), "Wikipedia (en)") for i in range(400)]
    lines = [pile_line(t, s) for t, s in texts]
    write_lines(str(root / "plain.jsonl"), lines[:100] + [b"{not json"] * 3, "plain")
    write_lines(str(root / "source.jsonl.zst"), lines[100:200])
    reframe(str(root / "source.jsonl.zst"), str(root / "framed.jsonl.zst"), int(CHUNK_MB * (1 << 20)), 64 << 20,
            frame_bytes=1 << 15)
    def table(rows):
        return pa.table({"text": [t for t, _ in rows], "meta": [{"pile_set_name": s} for _, s in rows]})

    pq.write_table(table(texts[200:300]), root / "groups.parquet", row_group_size=30)
    pyarrow.feather.write_feather(table(texts[300:350]), str(root / "whole.arrow"), compression="uncompressed")
    write_lines(str(root / "zipped.jsonl.gz"), lines[350:], "gz")
    return [str(root / name) for name in ("plain.jsonl", "framed.jsonl.zst", "groups.parquet", "whole.arrow",
                                          "zipped.jsonl.gz")]


def _argv(inputs: list[str], model: str, out: Path, *extra: str) -> list[str]:
    return [*(a for path in inputs for a in ("--input", path)), "--tokenizer_model", model, "--output_dir", str(out),
            "--seq_len", "64", "--chunk_mb", str(CHUNK_MB), *extra, *FAST_BEAM]


def test_every_kind_of_work_item_is_taken_up_without_reading_it(inputs, tiny_model, tmp_path, caplog):
    out = tmp_path / "out"
    with pytest.raises(Exception, match="more than --max_dead_letter_fraction"):
        run.main(_argv(inputs, tiny_model, out, "--max_dead_letter_fraction", "0"))
    clean = run.main(_argv(inputs, tiny_model, tmp_path / "clean", "--max_dead_letter_fraction", "1"))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        manifest = run.main(_argv(inputs, tiny_model, out, "--max_dead_letter_fraction", "1", "--resume"))
    chunks = clean["resume"]["chunks_processed"]
    assert manifest["resume"] == {"count": 1, "chunks_processed": 0, "chunks_reused": chunks}
    reading = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reading ")]
    assert reading == [], reading  # no input was read again
    assert "work item(s) finished by the run before are not read again" in caplog.text
    assert resumed_digests(out) == resumed_digests(tmp_path / "clean")
    frames = [i for i in manifest["inputs"] if i["path"].endswith("framed.jsonl.zst")]
    assert frames[0]["chunks"] > 1 and all(i.get("content_digest") for i in manifest["inputs"])
