"""--resume on an object store: the lock object a killed run leaves is taken over once its holder is gone.

S3 has no locks: the lock is an object written create-only, renewed by its holder while it runs
(pipeline/io/lock.py). A run killed with SIGKILL leaves it behind; `--resume` takes it over when
its holder is a process of this host that is gone, or a holder elsewhere that stopped renewing it,
and refuses while the holder renews it. The killed run's work items, committed on S3 with one PUT
each, are taken up: the clean run's bytes, only the chunks not committed processed.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from corpus_helpers import FAST_BEAM
from fault_helpers import PROCESSES, Job
from resume_helpers import kill_when, resumed_digests
from sample_corpus import write_sample_corpus

from pipeline.cli import run
from pipeline.io import lock as lock_module
from pipeline.io.lock import LOCK_NAME, OutputLock, OutputLockedError

pytestmark = pytest.mark.slow

FLAGS = ["--seq_len", "128", "--chunk_mb", "0.03", "--shard_size_mb", "0.05"]


def _items(fs, root: str) -> int:
    fs.invalidate_cache()
    return sum(1 for key in fs.find(f"{root}/.resume/result") if key.endswith(".item")
               and not key.rsplit("/", 1)[-1].startswith("."))


def test_a_killed_run_on_s3_is_taken_up_lock_and_all(s3, tiny_model, tmp_path):
    fs, env, bucket = s3
    corpus = tmp_path / "pile"
    write_sample_corpus(str(corpus), train_files=2, docs_per_file=160)
    argv = ["--input", str(corpus / "train" / "*.jsonl.zst"), "--tokenizer_model", tiny_model, *FLAGS]
    clean = run.main([*argv, "--output_dir", str(tmp_path / "clean"), *FAST_BEAM])
    chunks = clean["resume"]["chunks_processed"]
    out = f"s3://{bucket}/killed"
    job = Job(*argv, "--output_dir", out, *PROCESSES, env=env)
    kill_when(job, lambda: _items(fs, f"{bucket}/killed") >= 0.5 * chunks, "half of the chunks committed")
    left = _items(fs, f"{bucket}/killed")
    assert 0 < left < chunks
    assert fs.exists(f"{bucket}/killed/{LOCK_NAME}"), "the killed run left no lock: nothing was tested"
    with pytest.raises(OutputLockedError, match="--resume"):  # without it, the lock is refused as before
        run.main([*argv, "--output_dir", out, *FAST_BEAM])
    manifest = run.main([*argv, "--output_dir", out, "--resume", *FAST_BEAM])
    assert manifest["resume"] == {"count": 1, "chunks_processed": chunks - left, "chunks_reused": left}
    local = tmp_path / "fetched"
    fs.get(f"{bucket}/killed/", str(local) + "/", recursive=True)
    assert resumed_digests(local) == resumed_digests(tmp_path / "clean")
    assert not fs.exists(f"{bucket}/killed/{LOCK_NAME}") and not fs.exists(f"{bucket}/killed/.resume")


def test_a_lock_elsewhere_is_taken_over_only_once_it_stops_being_renewed(s3, monkeypatch):
    fs, _, bucket = s3
    monkeypatch.setattr(lock_module, "RENEW_S", 0.1)
    monkeypatch.setattr(lock_module, "STALE_S", 0.6)
    out = f"s3://{bucket}/elsewhere"
    key = f"{bucket}/elsewhere/{LOCK_NAME}"
    holder = {"run_id": "0123456789abcdef", "host": "another-host", "pid": 1, "started": "x", "renewed": 0}
    fs.pipe_file(key, json.dumps(holder).encode())
    stop = threading.Event()

    def renew():  # a run on another host, alive: it renews its lock
        while not stop.wait(0.1):
            holder["renewed"] += 1
            fs.pipe_file(key, json.dumps(holder).encode())

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        with pytest.raises(OutputLockedError, match="still writing"):
            OutputLock.acquire(out, "fedcba9876543210", overwrite=False, resume=True)
    finally:
        stop.set()
        renewer.join()
    started = time.monotonic()
    taken = OutputLock.acquire(out, "fedcba9876543210", overwrite=False, resume=True)  # no longer renewed: gone
    assert time.monotonic() - started >= 0.6
    assert json.loads(fs.cat_file(key))["run_id"] == "fedcba9876543210"
    time.sleep(0.35)  # its own holder renews it
    assert json.loads(fs.cat_file(key))["renewed"] >= 2
    taken.release()
    assert not fs.exists(key)


def test_a_lock_replaced_while_it_is_read_is_read_again(s3, monkeypatch):
    """Its holder renews it between the read's look and its GET (another ETag): read again, not an error."""
    from pipeline.io import files

    fs, _, bucket = s3
    url = f"s3://{bucket}/renewing/{LOCK_NAME}"
    fs.pipe_file(url, b'{"renewed": 1}')
    real, calls = files.read_bytes, []

    def renewed_meanwhile(target, *args):
        calls.append(target)
        if len(calls) == 1:  # the first read meets the holder's next version
            fs.pipe_file(url, b'{"renewed": 2}')
            raise files.NotAFileError("cannot be read (the remote file ... and Etag ... no longer exists.)")
        return real(target, *args)

    monkeypatch.setattr(lock_module, "read_bytes", renewed_meanwhile)
    assert lock_module._read_text(url) == '{"renewed": 2}' and len(calls) == 2
