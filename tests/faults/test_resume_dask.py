"""Resume on a real dask.distributed cluster (tests/dask_cluster.py): a worker killed, a scheduler lost.

- A worker process killed with SIGKILL while the job tokenizes: Dask runs its tasks again on the
  other worker, and those take the chunks the lost task had committed from the work folder: no
  committed item is written again (the run fails at its very end, on purpose, so that its work
  folder can be looked at), and --resume then gives the clean run's bytes, processing nothing.
- The scheduler killed while the job tokenizes (its workers frozen first, then killed, so that the
  committed items are counted while nothing moves): the job fails in one line and leaves its work
  folder on S3; the same command with --resume on a new cluster gives the clean run's bytes and
  processes exactly the chunks the lost run had not committed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import zstandard
from corpus_helpers import FAST_BEAM, write_lines
from dask_cluster import Driver, dask_cluster, kill_a_busy_worker
from resume_helpers import WORK, committed, items, resumed_digests
from s3_server import loopback_s3
from sample_corpus import write_sample_corpus

from pipeline.cli import run
from pipeline.format.manifest import load_manifest

pytestmark = pytest.mark.slow

BUCKET = "resume-bucket"
# Small chunks (many to commit before a kill); shards few (each is a write to the S3 server, which the checks
# do not need many of).
FLAGS = ["--seq_len", "128", "--chunk_mb", "0.03", "--shard_size_mb", "0.25"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Three train files, a few malformed lines in the first."""
    root = tmp_path_factory.mktemp("pile")
    write_sample_corpus(str(root), train_files=3, docs_per_file=160)
    first = root / "train" / "00.jsonl.zst"
    lines = zstandard.ZstdDecompressor().decompress(first.read_bytes(), max_output_size=1 << 30).splitlines()
    write_lines(str(first), lines[:10] + [b"{not json"] * 3 + lines[10:])
    return root


def _argv(inputs: str, model: str, out: str, *extra: str) -> list[str]:
    return ["--input", inputs, "--tokenizer_model", model, "--output_dir", out, *FLAGS, *extra]


@pytest.fixture(scope="module")
def clean(corpus, tiny_model, tmp_path_factory):
    """(digests, chunks) of an uninterrupted DirectRunner run."""
    out = tmp_path_factory.mktemp("clean") / "out"
    manifest = run.main(_argv(str(corpus / "train" / "*.jsonl.zst"), tiny_model, str(out),
                              "--max_dead_letter_fraction", "1", *FAST_BEAM))
    return resumed_digests(out), manifest["resume"]["chunks_processed"]


def _signal_workers(cluster, sig: int) -> None:
    for proc in cluster.workers:  # each worker under its nanny, in a process group of its own
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def test_a_worker_killed_while_tokenizing_redoes_no_committed_chunk(corpus, tiny_model, clean, tmp_path):
    """The run fails at its very end (dead letters over the limit), so its work folder stays to be looked at."""
    digests, chunks = clean
    out = tmp_path / "out"
    inputs = str(corpus / "train" / "*.jsonl.zst")
    with dask_cluster(tmp_path / "cluster", workers=2) as cluster:
        driver = Driver(_argv(inputs, tiny_model, str(out), "--max_dead_letter_fraction", "0", "--runner",
                               "DaskRunner", "--dask_client_address", cluster.address), tmp_path / "job.log")
        driver.wait_for(lambda: committed(out) >= 0.3 * chunks, "30% of the chunks committed")
        before = {}

        def committed_now():  # what was committed when the worker died
            before.update({p: p.stat().st_ino for p in items(out)})

        busy = kill_a_busy_worker(cluster, committed_now)
        assert busy, "no worker was running a task"
        assert driver.finish() == 1 and "dead letters" in driver.text(), driver.text()[-3000:]
    after = {p: p.stat().st_ino for p in items(out)}
    assert len(after) == chunks
    assert {p: after[p] for p in before} == before, "a chunk committed before the worker died was done again"
    manifest = run.main(_argv(inputs, tiny_model, str(out), "--max_dead_letter_fraction", "1", "--resume", *FAST_BEAM))
    assert manifest["resume"] == {"count": 1, "chunks_processed": 0, "chunks_reused": chunks}
    assert resumed_digests(out) == digests
    assert not (out / WORK).exists()


def test_a_lost_scheduler_then_resume_on_a_new_cluster_on_s3(corpus, tiny_model, clean, tmp_path):
    _, chunks = clean
    with loopback_s3(BUCKET) as (fs, env):
        fs.put(str(corpus) + "/", f"{BUCKET}/pile/", recursive=True)
        inputs, out = f"s3://{BUCKET}/pile/train/*.jsonl.zst", f"s3://{BUCKET}/out"
        # The inputs as the job names them.
        run.main(_argv(inputs, tiny_model, str(tmp_path / "clean"), "--max_dead_letter_fraction", "1", *FAST_BEAM))
        digests = resumed_digests(tmp_path / "clean")
        argv = _argv(inputs, tiny_model, out, "--max_dead_letter_fraction", "1", "--runner", "DaskRunner",
                     "--dask_connection_timeout", "5")

        def on_s3() -> int:
            fs.invalidate_cache()
            return sum(1 for key in fs.find(f"{BUCKET}/out/{WORK}/result") if key.endswith(".item")
                       and not key.rsplit("/", 1)[-1].startswith("."))

        with dask_cluster(tmp_path / "lost", workers=2, env=env) as lost:
            driver = Driver([*argv, "--dask_client_address", lost.address], tmp_path / "lost.log", env)
            driver.wait_for(lambda: on_s3() >= 0.4 * chunks, "40% of the chunks committed")
            _signal_workers(lost, signal.SIGSTOP)  # nothing moves while the committed items are counted
            os.kill(lost.scheduler.pid, signal.SIGKILL)
            left = on_s3()
            _signal_workers(lost, signal.SIGKILL)
            code = driver.finish(timeout=300)
        assert code == 1, driver.text()[-3000:]
        assert 0 < left < chunks and not fs.exists(f"{BUCKET}/out/manifest.json")
        with dask_cluster(tmp_path / "fresh", workers=2, env=env) as fresh:
            again = Driver([*argv, "--resume", "--dask_client_address", fresh.address], tmp_path / "again.log", env)
            assert again.finish() == 0, again.text()[-3000:]
        local = tmp_path / "fetched"
        fs.get(f"{BUCKET}/out/", str(local) + "/", recursive=True)
    assert load_manifest(str(local))["resume"] == {"count": 1, "chunks_processed": chunks - left,
                                                    "chunks_reused": left}
    assert resumed_digests(local) == digests
    assert not (local / WORK).exists()
