"""A run killed with SIGKILL at each point of the job, resumed with --resume: the clean run's bytes, no work redone.

The job runs as a user runs it (`python -m pipeline.run`, DirectRunner's two worker processes) and
is killed, driver and workers together, once it shows the kill point from outside
(resume_helpers.py): a quarter, half and nine tenths of its chunks' results committed, every
chunk's dedup input committed and no result yet (dedup's groups running), a shard being written;
or stopped with SIGINT (Ctrl-C) at nine tenths.
Then `--resume` runs (in this process, on one worker: another worker count than the killed run's)
and must give every file of a clean run byte for byte, the manifest apart from its run id and its
`resume` entry, which must say that it processed exactly the chunks the killed run had not
committed: the work redone is at most what was in flight, never a committed item.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest
import zstandard
from corpus_helpers import FAST_BEAM, edit_word, pile_line, write_lines
from fault_helpers import PROCESSES, Job
from resume_helpers import committed, items, kill_when, resumed_digests, shard_appeared
from sample_corpus import write_sample_corpus

from pipeline.cli import run

pytestmark = pytest.mark.slow

# ~180 chunks of ~9 MB: the last tenth of the tokenizing takes a few hundred ms even on two fast cores.
FLAGS = ["--seq_len", "128", "--chunk_mb", "0.05", "--shard_size_mb", "0.1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """Three train files, the third with exact and near copies of the first's documents (dedup removes some)."""
    root = tmp_path_factory.mktemp("pile")
    write_sample_corpus(str(root), train_files=3, docs_per_file=400)
    read = zstandard.ZstdDecompressor()
    first = read.decompress((root / "train" / "00.jsonl.zst").read_bytes(), max_output_size=1 << 30).splitlines()
    third = root / "train" / "02.jsonl.zst"
    lines = read.decompress(third.read_bytes(), max_output_size=1 << 30).splitlines()
    text = json.loads(first[5])["text"]
    copies = [first[3], first[7], pile_line(edit_word(text, len(text.split()) // 2, "edited"), "Pile-CC")]
    write_lines(str(third), lines[:20] + copies + lines[20:])
    return str(root / "train" / "*.jsonl.zst")


def _argv(corpus: str, model: str, out: Path, *extra: str) -> list[str]:
    flags = FLAGS[2:] if "jsonl" in extra else FLAGS  # JSON lines are not packed: no --seq_len
    return ["--input", corpus, "--tokenizer_model", model, "--output_dir", str(out), *flags, *extra]


@pytest.fixture(scope="module")
def clean(corpus, tiny_model, tmp_path_factory):
    """(digests, chunks) of uninterrupted runs, by case: TFRecord, Megatron, JSON lines, TFRecord with near dedup."""
    out = {}
    for case, extra in CASES.items():
        folder = tmp_path_factory.mktemp(f"clean-{case}") / "out"
        manifest = run.main(_argv(corpus, tiny_model, folder, *extra, *FAST_BEAM))
        assert manifest["resume"] == {"count": 0, "chunks_processed": manifest["resume"]["chunks_processed"],
                                      "chunks_reused": 0}
        assert not (folder / ".resume").exists(), "a successful run leaves no work folder"
        out[case] = resumed_digests(folder), manifest["resume"]["chunks_processed"]
    return out


CASES = {"tfrecord": [], "megatron": ["--output_format", "megatron"], "jsonl": ["--output_format", "jsonl"],
         "dedup": ["--dedup", "near"]}


def _resume(corpus: str, model: str, out: Path, case: str) -> dict:
    return run.main(_argv(corpus, model, out, *CASES[case], "--resume", *FAST_BEAM))


def _check_resumed(manifest: dict, out: Path, clean_case, left: int) -> None:
    digests, chunks = clean_case
    assert manifest["resume"] == {"count": 1, "chunks_processed": chunks - left, "chunks_reused": left}
    assert resumed_digests(out) == digests
    assert not (out / ".resume").exists()


# The share killed at is the item of the commit and resume (the same code for every format); the
# format is what the writing differs in: half is run in the two other formats.
@pytest.mark.parametrize(("case", "share"), [("tfrecord", 0.25), ("tfrecord", 0.9), ("megatron", 0.5),
                                             ("jsonl", 0.5)])
def test_a_run_killed_while_tokenizing_resumes_to_the_clean_bytes(case, share, corpus, tiny_model, clean, tmp_path):
    out = tmp_path / "out"
    chunks = clean[case][1]
    job = Job(*_argv(corpus, tiny_model, out, *CASES[case]), *PROCESSES)
    kill_when(job, lambda: committed(out) >= share * chunks, f"{share:.0%} of the chunks committed")
    left = committed(out)
    assert share * chunks <= left < chunks, "the kill came after the tokenizing stage: nothing was tested"
    assert not (out / "manifest.json").exists()
    _check_resumed(_resume(corpus, tiny_model, out, case), out, clean[case], left)


def test_a_run_killed_while_writing_shards_redoes_no_chunk(corpus, tiny_model, clean, tmp_path):
    out = tmp_path / "out"
    chunks = clean["tfrecord"][1]
    job = Job(*_argv(corpus, tiny_model, out), *PROCESSES)
    kill_when(job, lambda: shard_appeared(out), "a shard being written")
    assert committed(out) == chunks and not (out / "manifest.json").exists()
    _check_resumed(_resume(corpus, tiny_model, out, "tfrecord"), out, clean["tfrecord"], chunks)


def test_a_run_killed_in_dedups_groups_signs_no_chunk_again(corpus, tiny_model, clean, tmp_path, caplog):
    out = tmp_path / "out"
    chunks = clean["dedup"][1]
    job = Job(*_argv(corpus, tiny_model, out, *CASES["dedup"]), *PROCESSES)
    kill_when(job, lambda: committed(out, "dedup") >= chunks, "every chunk's dedup input committed")
    assert committed(out, "dedup") == chunks and committed(out) == 0, "not killed between signing and tokenizing"
    with caplog.at_level(logging.INFO, logger="pipeline"):
        manifest = _resume(corpus, tiny_model, out, "dedup")
    assert f"dedup's input: 0 chunk(s) signed, {chunks} reused" in caplog.text
    _check_resumed(manifest, out, clean["dedup"], 0)
    assert manifest["removed"]["by_reason"], "the corpus's copies were not removed: dedup was not tested"


def test_torn_and_missing_work_items_are_done_again_never_trusted(corpus, tiny_model, clean, tmp_path):
    """Items cut short or changed are redone from their work item (read again), a missing one with its file."""
    out = tmp_path / "out"
    chunks = clean["tfrecord"][1]
    job = Job(*_argv(corpus, tiny_model, out), *PROCESSES)
    kill_when(job, lambda: shard_appeared(out), "a shard being written")
    results = items(out)
    assert len(results) == chunks
    by_file = {}
    for item in results:
        by_file.setdefault(item.parent.name, []).append(item)
    first, second, third = (by_file[name] for name in sorted(by_file))
    cut, flipped, gone = first[1], first[-1], second[0]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])  # half written
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01  # one byte changed
    flipped.write_bytes(bytes(data))
    gone.unlink()
    units = {unit.parent.name: unit for unit in items(out, "unit")}
    torn_unit = units[third[0].parent.name]  # what the third file held: torn, so the file is read again
    torn_unit.write_bytes(torn_unit.read_bytes()[:-3])
    _check_resumed(_resume(corpus, tiny_model, out, "tfrecord"), out, clean["tfrecord"], chunks - 3)


def test_a_run_stopped_with_ctrl_c_at_nine_tenths_keeps_its_work_for_resume(corpus, tiny_model, clean, tmp_path):
    """SIGINT, as Ctrl-C sends it: the run stops in one line, removes what it made but its work folder."""
    out = tmp_path / "out"
    chunks = clean["tfrecord"][1]
    job = Job(*_argv(corpus, tiny_model, out), *PROCESSES)
    job.wait_until(lambda: committed(out) >= 0.9 * chunks, "90% of the chunks committed")
    os.kill(job.proc.pid, signal.SIGINT)
    assert job.finish(timeout=120) == 128 + signal.SIGINT, job.output()[-3000:]
    assert "--resume" in job.output()
    assert sorted(p.name for p in out.iterdir()) == [".resume"]
    left = committed(out)
    assert 0.9 * chunks <= left < chunks, "the run was stopped after its tokenizing stage: nothing was tested"
    _check_resumed(_resume(corpus, tiny_model, out, "tfrecord"), out, clean["tfrecord"], left)
