"""What the reader benchmarks share: synthetic outputs, the raw TFRecord baseline, and how a run is timed.

`drain` consumes batches inside TensorFlow (`Dataset.reduce`, as a trainer's tf.function step
does); `drain_loop` in a plain Python `for batch in ds` loop, as an eager training loop does.
Used by scripts/bench/bench_reader.py, bench_reader_mixture.py and bench_reader_store.py.
"""

from __future__ import annotations

import os
import sys
import time

import tensorflow as tf

# scripts/datagen/ (the development data generators, shared with the tests)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datagen"))

from pipeline.format import manifest as manifest_lib  # noqa: E402
from pipeline.format import records  # noqa: E402


def write_synthetic(out_dir: str, shards: int, records_per_shard: int, seq_len: int) -> str:
    """Shards of random uint16 records plus a manifest (scripts/datagen/synthetic_output.py does the writing)."""
    from synthetic_output import write_output

    if os.path.exists(manifest_lib.manifest_path(out_dir)):
        m = manifest_lib.load_manifest(out_dir)
        if m["seq_len"] == seq_len and [s["records"] for s in m["shards"]] == [records_per_shard] * shards:
            return out_dir
    write_output(out_dir, [records_per_shard] * shards, seq_len=seq_len, document_boundaries=False)
    return out_dir


def raw_dataset(manifest_dir: str, batch_size: int, read_buffer: int, parallel_reads: int | None):
    """The baseline: TFRecordDataset over the shards -> batch -> parse_example + decode_raw -> int32."""
    m = manifest_lib.load_manifest(manifest_dir)
    mf = manifest_lib.manifest_path(manifest_dir)
    files = [manifest_lib.shard_url(mf, s) for s in m["shards"]]
    return _raw(files, m, batch_size, read_buffer, parallel_reads)


def _raw(files: list[str], m: dict, batch_size: int, read_buffer: int, parallel_reads: int | None):
    seq_len = m["seq_len"]
    dtype = {"uint16": tf.uint16, "int32": tf.int32}[m["features"]["tokens"]["dtype"]]
    spec = {
        records.TOKENS: tf.io.FixedLenFeature([], tf.string),
        records.VALID_LABELS: tf.io.FixedLenFeature([], tf.int64, default_value=seq_len),
    }

    def parse(batch):
        parsed = tf.io.parse_example(batch, spec)
        tokens = tf.cast(tf.io.decode_raw(parsed[records.TOKENS], dtype), tf.int32)
        tokens = tf.reshape(tokens, [batch_size, seq_len + 1])
        mask = tf.cast(tf.range(seq_len, dtype=tf.int64)[None] < parsed[records.VALID_LABELS][:, None], tf.float32)
        return {"inputs": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": mask}

    ds = tf.data.TFRecordDataset(files, buffer_size=read_buffer, num_parallel_reads=parallel_reads).repeat()
    return (
        ds.batch(batch_size, drop_remainder=True)
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def rss_mib() -> float:
    """Resident memory of this process now (Linux), MiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def drain(ds, max_batches: int) -> tuple[int, float]:
    """(tokens delivered, seconds) for max_batches batches, consumed inside the TF runtime.

    `reduce` pulls batches in C++, as a trainer's tf.function step does; a Python `for` loop over
    the dataset would add Python's cost to every batch and cap both paths at the same rate.
    """
    start = time.perf_counter()
    tokens = ds.take(max_batches).reduce(
        tf.constant(0, tf.int64), lambda acc, batch: acc + tf.size(batch["labels"], out_type=tf.int64)
    )
    return int(tokens), time.perf_counter() - start


def drain_loop(ds, max_batches: int) -> tuple[int, float]:
    """(tokens delivered, seconds) for max_batches batches taken in a plain Python loop, each as NumPy.

    What an eager training loop pays: one `next()` per batch through Python, the batch's arrays
    handed to Python (`.numpy()`), while the reader's own threads run beside it.
    """
    start = time.perf_counter()
    tokens = 0
    for batch in ds.take(max_batches):
        tokens += batch["labels"].numpy().size
        batch["inputs"].numpy()
        batch["loss_mask"].numpy()
    return tokens, time.perf_counter() - start


def bytes_read() -> int:
    """Bytes this process has read through read(2)/pread(2) so far (Linux), page-cache hits included."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def rss_anon_mib() -> float:
    """Anonymous resident memory of this process (Linux), MiB: what the reader holds, not the page cache."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon:"))
