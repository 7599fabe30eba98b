"""The work folder and what is committed in it, without a job: items checked when read back, what decides the bytes.

pipeline/io/workfolder.py (an item's bytes, its check), pipeline/process/commit.py (what each kind
holds), pipeline/process/fingerprint.py (what a resume must share), pipeline/core/content.py (the
inputs' content digest). The jobs that commit and resume: tests/faults/test_resume_*.py.
"""

from __future__ import annotations

import dataclasses
import doctest
import json

import numpy as np
import pytest

from pipeline.config.job import PipelineConfig
from pipeline.core import content
from pipeline.core.stats import JobStats
from pipeline.format.framing import FramedRecords
from pipeline.io import workfolder
from pipeline.io.frames import Frame, Stripe
from pipeline.io.workfolder import WorkFolder, decode_item, encode_item, read_job, remove_work_folder, write_job
from pipeline.process import commit, fingerprint
from pipeline.process.commit import ReadInfo, SignedChunk
from pipeline.process.result import Block, ChunkResult
from pipeline.stages.policy import Verdict
from pipeline.tokenize.kinds.base import SpecialIds
from pipeline.tokenize.model import BackendChoice, TokenizerSpec


def test_the_content_digest_doctests():
    assert doctest.testmod(content).failed == 0


def test_an_item_reads_back_and_anything_else_is_refused_saying_why():
    data = encode_item("job1", ["result", "p", 3, "00000007"], b"payload bytes", {"run": "r"})
    header, payload = decode_item(data, "job1", ["result", "p", 3, "00000007"])
    assert bytes(payload) == b"payload bytes" and header["run"] == "r"
    flipped = bytearray(data)
    flipped[30] ^= 1
    for bad, why in [(data[: len(data) // 2], "check"), (bytes(flipped), "check"), (b"not ours" * 4, "not a work item"),
                     (data[:10], "not a work item")]:
        with pytest.raises(ValueError, match=why):
            decode_item(bad, "job1", ["result", "p", 3, "00000007"])
    with pytest.raises(ValueError, match="another job's"):
        decode_item(data, "job2", ["result", "p", 3, "00000007"])
    with pytest.raises(ValueError, match="another item's"):
        decode_item(data, "job1", ["result", "p", 3, "00000008"])


def _result(file_index: int, chunk_index: int) -> ChunkResult:
    records = FramedRecords(b"abcdefgh", np.array([3, 8], np.int64))
    return ChunkResult(file_index, chunk_index, 10, [Block((0, 0, file_index, chunk_index), records)], [], [],
                       [], JobStats(lines=2))


def test_a_committed_result_is_fetched_with_its_verdicts_only_and_a_torn_one_is_none(tmp_path, caplog):
    folder = WorkFolder(str(tmp_path / "out"), "job1", "run1")
    info = ReadInfo("in.jsonl", 2, 9, 12345)
    commit.commit_result(folder, "p", _result(1, 4), info, "v1")
    result, read, run = commit.fetch_result(folder, "p", 1, 4, "v1")
    assert result.to_bytes() == _result(1, 4).to_bytes() and read == info and run == "run1"
    assert commit.fetch_result(folder, "p", 1, 4, "v2") is None  # made with other verdicts
    assert commit.fetch_result(folder, "p", 1, 5, "v1") is None  # never committed
    assert commit.fetch_result(folder, "q", 1, 4, "v1") is None  # another step's
    assert WorkFolder(str(tmp_path / "out"), "job2", "run2").fetch(commit.RESULT, "p", 1, "00000004") is None
    assert folder.names(commit.RESULT, "p") == {1: {"00000004"}}
    path = tmp_path / "out" / ".resume" / "result" / "p" / "00001" / "00000004.item"
    path.write_bytes(path.read_bytes()[:-1])
    assert commit.fetch_result(folder, "p", 1, 4, "v1") is None
    assert "is not used: its check does not match" in caplog.text


def test_job_json_and_the_folders_removal(tmp_path):
    out = str(tmp_path / "out")
    assert read_job(out) is None
    write_job(out, {"digest": "d", "facts": {"a": 1}, "runs": ["r1"]})
    assert read_job(out)["runs"] == ["r1"]
    (tmp_path / "out" / ".resume" / "job.json").write_text("[1, 2]")
    with pytest.raises(workfolder.WorkFolderError, match="damaged"):
        read_job(out)
    assert remove_work_folder(out) and not (tmp_path / "out" / ".resume").exists()
    assert remove_work_folder(out)  # nothing there: nothing to do


def test_dedups_input_of_a_chunk_reads_back_and_gives_the_same_verdicts_digest():
    verdicts = {3: Verdict(text="cut text", reason=None, records=({"reason": "x_cut", "rule": "r"},),
                           tally={"stage": {"k": 1}}, labels={"score": 0.5})}
    signed = SignedChunk([(b"\x01" * 16, (7, {"subset": "A", "chunk": 0}, b"\x00\x01" * 8)),
                          (None, (8, {"subset": "B", "chunk": 0}, None))], [(7, b"\x05" * 24)],
                         [{"reason": "contaminated", "line": 2}], verdicts)
    back = SignedChunk.from_bytes(signed.to_bytes())
    assert back == signed
    removed = {2: {"reason": "duplicate_exact", "line": 2}}
    assert commit.verdicts_digest(removed, back.verdicts) == commit.verdicts_digest(removed, verdicts)
    assert commit.verdicts_digest(removed, None) != commit.verdicts_digest({}, None)
    assert commit.verdicts_digest(None, None) is None
    with pytest.raises(ValueError):
        SignedChunk.from_bytes(signed.to_bytes()[:-3])


def test_work_items_are_named_by_what_they_hold_not_by_who_reads_them():
    frame = Frame(0, 10, 0, 100, 0, 5, 8, 3)
    assert commit.unit_key(None) == commit.unit_key(Stripe(1, 3)) == "whole"
    assert commit.unit_key(frame) == "frame-00000008"
    config = PipelineConfig(inputs=("a.jsonl",), output_dir="out", tokenizer_model="m")
    other = dataclasses.replace(config, subsets=("Pile-CC",))
    assert commit.part_of(config) == commit.part_of(dataclasses.replace(config, progress_every=1.0))
    assert commit.part_of(config) != commit.part_of(other)


def _spec(sha: str = "abc") -> TokenizerSpec:
    return TokenizerSpec("m", "sentencepiece", sha, BackendChoice("sentencepiece", "0.2", {}),
                         SpecialIds(100, 1, 2, -1, 0, False, True))


def test_what_differs_names_the_first_difference_and_free_options_are_none(tmp_path):
    source = tmp_path / "a.jsonl"
    source.write_bytes(b'{"text": "x"}\n')
    config = PipelineConfig(inputs=(str(source),), output_dir="out", tokenizer_model="m")
    snapshots = ((str(source), fingerprint.snapshot(str(source))),)
    facts = json.loads(json.dumps(fingerprint.job_facts(config, snapshots, (), _spec())))
    same = dataclasses.replace(config, progress_every=1.0, fan_out="yes", max_dead_letter_fraction=1.0,
                               output_dir="elsewhere", resume=True)
    assert fingerprint.what_differs(facts, fingerprint.job_facts(same, snapshots, (), _spec())) is None
    assert fingerprint.what_differs(
        facts, fingerprint.job_facts(dataclasses.replace(config, seq_len=4096), snapshots, (), _spec())
    ) == "--seq_len was 2048, now 4096"
    assert "tokenizer's sha256 differs" in fingerprint.what_differs(
        facts, fingerprint.job_facts(config, snapshots, (), _spec("def")))
    source.write_bytes(b'{"text": "xy"}\n')
    changed = ((str(source), fingerprint.snapshot(str(source))),)
    assert f"input {source} changed since the run (its size went from 14 to 15 bytes)" == fingerprint.what_differs(
        facts, fingerprint.job_facts(config, changed, (), _spec()))
    older = json.loads(json.dumps(facts))
    older["code"]["output_version"] -= 1
    assert fingerprint.what_differs(older, facts).startswith("the code's output differs (output_version")
    assert fingerprint.digest(facts) != fingerprint.digest(older)


def test_taking_up_a_chunk_commits_a_new_result_and_takes_a_committed_one_back(tmp_path):
    """process/taking_up.py without Beam: processed, then reused by a later run; a changed chunk refused."""
    from pipeline.core.documents import Line
    from pipeline.io.inputs import Chunk
    from pipeline.io.snapshot import InputChangedError
    from pipeline.process.taking_up import TakingUp

    config = PipelineConfig(inputs=("in.jsonl",), output_dir=str(tmp_path / "out"), tokenizer_model="m")
    chunk = Chunk(1, 4, "in.jsonl", (Line(1, 0, b'{"text": "a"}'), Line(2, 14, b'{"text": "b"}')))
    nowhere = TakingUp(None, config)
    assert nowhere.take(chunk, None, None) == (None, chunk, None) and nowhere.drain() == []
    result = _result(1, 4)
    nowhere.commit(result, chunk, None)
    assert result.stats.work == {"processed": 1} and not (tmp_path / "out").exists()

    first = TakingUp(WorkFolder(str(tmp_path / "out"), "job1", "run1"), config)
    assert first.take(chunk, None, None) == (None, chunk, None) and first.drain() == [None]
    first.commit(_result(1, 4), chunk, None)
    again, _, read = first.take(chunk, None, None)  # a task of this run done again
    expected = _result(1, 4)
    expected.stats.work = {"processed": 1}
    assert again.to_bytes() == expected.to_bytes() and read is None
    later = TakingUp(WorkFolder(str(tmp_path / "out"), "job1", "run2"), config)
    taken, _, _ = later.take(chunk, None, None)
    assert taken.stats.work == {"reused": 1} and later.drain() == []
    changed = dataclasses.replace(chunk, lines=(Line(1, 0, b'{"text": "c"}'), chunk.lines[1]))
    with pytest.raises(InputChangedError, match="changed since the run this one resumes"):
        later.take(changed, None, None)
