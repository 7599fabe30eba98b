"""Records through local spill files (DirectRunner): same bytes back, and nothing left behind."""

import os

import numpy as np
import pytest
from corpus_helpers import FAST_BEAM, pile_line, write_lines

from pipeline.cli import run
from pipeline.format.framing import FramedRecords
from pipeline.io import spill


def _records(n, start=0):
    return [f"record {i} ".encode() * (1 + i % 5) for i in range(start, start + n)]


def test_spilled_blocks_read_back_as_the_same_framed_records(tmp_path):
    writer = spill.SpillWriter(str(tmp_path))
    first, second = FramedRecords.of(_records(7)), FramedRecords.of(_records(5, start=7))
    ref1, ref2 = writer.write(first), writer.write(second)
    writer.close()
    assert ref1.path == ref2.path and len(ref1) == 7 and len(ref2) == 5
    assert ref1.load().data == first.data and ref2.load().data == second.data
    assert np.array_equal(ref2.load().ends, second.ends)
    # A subset in any order, with gaps: the same records as taking from the block itself.
    picked = [6, 0, 1, 2, 4]
    assert spill.load(ref1.take(picked)).data == first.take(picked).data
    assert spill.load(first) is first
    assert len(ref1.take([]).load()) == 0


def test_a_truncated_spill_file_is_an_error_not_short_data(tmp_path):
    writer = spill.SpillWriter(str(tmp_path))
    ref = writer.write(FramedRecords.of(_records(4)))
    writer.close()
    os.truncate(ref.path, int(ref.ends[-1]) - 1)
    with pytest.raises(OSError, match="shorter"):
        ref.load()


def test_spill_dir_is_hidden_in_a_local_output_and_removed(tmp_path):
    path = spill.make_spill_dir(str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path) and os.path.basename(path).startswith(".spill.tmp-")
    open(os.path.join(path, "x.records"), "wb").close()
    spill.remove_spill_dir(path)
    assert os.listdir(tmp_path) == []
    remote = spill.make_spill_dir("memory://bucket/out")  # not a local path: a local temp dir
    assert os.path.isdir(remote) and not remote.startswith("memory:")
    spill.remove_spill_dir(remote)
    assert not os.path.exists(remote)


def test_direct_runner_moves_records_through_spill_files_and_cleans_up(tmp_path, tiny_model, monkeypatch):
    """The pipeline really spills on DirectRunner (in_memory mode runs the DoFns in this process)."""
    written = []
    real_write = spill.SpillWriter.write

    def counting_write(self, block):
        ref = real_write(self, block)
        written.append((os.path.dirname(ref.path), len(ref)))
        return ref

    monkeypatch.setattr(spill.SpillWriter, "write", counting_write)
    path = write_lines(str(tmp_path / "in" / "00.jsonl.zst"), [pile_line(f"document {i} " * 40) for i in range(60)])
    out = tmp_path / "out"
    manifest = run.main(["--input", path, "--output_dir", str(out), "--tokenizer_model", tiny_model,
                         "--seq_len", "32", *FAST_BEAM])
    assert sum(n for _, n in written) == manifest["totals"]["records"] > 0
    assert {d for d, _ in written} and all(os.path.basename(d).startswith(".spill.tmp-") for d, _ in written)
    run_dir = f"run-{manifest['run_id']}"
    assert sorted(os.listdir(out)) == ["manifest.json", run_dir]
    assert os.listdir(out / run_dir) == ["train-00000-of-00001.tfrecord"]

