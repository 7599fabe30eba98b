"""Benchmark: tokens/s of pipeline.tfdata.make_dataset against raw TFRecordDataset + batched parse,
and the bytes each rank reads for world sizes 1, 2 and 8.

Both paths read the same shards in the same process, alternately (raw, reader, raw, reader, ...), so
the page cache and the machine's load treat them alike; the shards are read once first to warm the
cache. Reported: median tokens/s (label positions delivered) per path, their ratio, and the
reader's time to first batch (from the make_dataset call, manifest checks included).

Bytes read per rank: for a global batch of 8 x --batch_size, every rank of W = 1, 2, 8 reads one
epoch in turn; the bytes it reads are measured by the kernel (the `rchar` count of /proc/self/io:
every read(2)/pread(2), page-cache hits included) and compared with the bytes of the records it
delivers and with the whole output.

    python scripts/bench/bench_reader.py                       # synthetic shards written to --workdir
    python scripts/bench/bench_reader.py --manifest /data/out  # an existing pipeline output
    python scripts/bench/bench_reader.py --mixture_sources 22  # a mixture of 22 synthetic outputs

With --mixture_sources N: N synthetic outputs of different sizes (--records_per_shard x 1..4
records each, one shard), mixed with the `tokens` preset (each source in proportion to its
records); raw reads the same N shards through one TFRecordDataset. The reader's path is the
mixture's: the blend, per-source streams and windows (pipeline/reader/mixture.py). Bytes per rank
are counted over as many steps as the sources hold records.

With --mixture_sources, each path is also timed in its steady state: a fresh run of twice
--max_batches, less the first run, so that the start (the mixture's plan, graph building; its own
figure, time to first batch) cancels out.

Target: reader >= 0.8x raw, first batch < 2 s, each rank reading ~1/W of the output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import tensorflow as tf

# scripts/datagen/ (the development data generators, shared with the tests)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datagen"))

from pipeline import tfdata
from pipeline.format import manifest as manifest_lib
from pipeline.format import records


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
    the dataset would cost ~0.3 ms per batch and cap both paths at the same rate.
    """
    start = time.perf_counter()
    tokens = ds.take(max_batches).reduce(
        tf.constant(0, tf.int64), lambda acc, batch: acc + tf.size(batch["labels"], out_type=tf.int64)
    )
    return int(tokens), time.perf_counter() - start


def bytes_read() -> int:
    """Bytes this process has read through read(2)/pread(2) so far (Linux), page-cache hits included."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def bytes_per_rank(out: str, global_batch: int, world_sizes, shuffle_buffer, lanes) -> dict:
    """For each world size: bytes each rank reads in one epoch, and the bytes of the records it gets."""
    m = manifest_lib.load_manifest(out)
    total_bytes = sum(s["bytes"] for s in m["shards"])
    record_bytes = total_bytes / sum(s["records"] for s in m["shards"])
    results = {}
    for w in world_sizes:
        read, used = [], []
        for rank in range(w):
            ds = tfdata.make_dataset(out, global_batch_size=global_batch, dp_rank=rank, dp_size=w, seed=1,
                                     shuffle_buffer=shuffle_buffer, num_parallel_reads=lanes)
            before = bytes_read()
            steps = int(ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
            read.append(bytes_read() - before)
            used.append(steps * (global_batch // w) * record_bytes)
        results[w] = {"read_mib_max": max(read) / 2**20, "read_mib_mean": sum(read) / w / 2**20,
                      "read_over_used": max(r / u for r, u in zip(read, used, strict=True)),
                      "fraction_of_output": max(read) / total_bytes}
        print(f"W={w}: bytes read per rank {results[w]['read_mib_max']:.1f} MiB max "
              f"({results[w]['read_mib_mean']:.1f} mean) = {results[w]['read_over_used']:.3f}x the records it "
              f"uses, {100 * results[w]['fraction_of_output']:.1f}% of the output ({total_bytes / 2**20:.0f} MiB)")
    return results


def write_mixture(workdir: str, sources: int, records: int, seq_len: int) -> list[tuple[str, str, float]]:
    """N synthetic outputs of 1-4 x `records` records (distinct ids), as a mixture weighted by records."""
    from synthetic_output import write_output

    out = []
    for i in range(sources):
        n = records * (1 + i % 4)
        d = os.path.join(workdir, f"mix{sources}-L{seq_len}", f"source{i:02d}")
        if not os.path.exists(manifest_lib.manifest_path(d)):
            write_output(d, [n], seq_len=seq_len, document_boundaries=False, first_id=i * 1_000_000)
        out.append((f"source{i:02d}", d, float(n)))
    return out


def raw_mixture_dataset(dirs: list[str], batch_size: int, read_buffer: int):
    """raw_dataset over every source's shards: the same records, no blend, no checks."""
    files = []
    for d in dirs:
        m = manifest_lib.load_manifest(d)
        files += [manifest_lib.shard_url(manifest_lib.manifest_path(d), s) for s in m["shards"]]
    return _raw(files, manifest_lib.load_manifest(dirs[0]), batch_size, read_buffer, None)


def mixture_main(args) -> dict:
    mix = write_mixture(args.workdir, args.mixture_sources, args.records_per_shard, args.seq_len)
    dirs = [d for _, d, _ in mix]
    total = sum(int(w) for _, _, w in mix)
    record_bytes = sum(sum(s["bytes"] for s in manifest_lib.load_manifest(d)["shards"]) for d in dirs) / total
    print(f"mixture: {len(mix)} sources, {total} records, seq_len {args.seq_len}, {total * record_bytes / 2**20:.0f} "
          f"MiB; batch {args.batch_size}; cpus {os.cpu_count()}; TF {tf.__version__}")
    drain(raw_mixture_dataset(dirs, args.batch_size, tfdata.DEFAULT_READ_BUFFER_BYTES), total // args.batch_size)
    results: dict[str, list[float]] = {"raw": [], "mixture": []}
    first_batch = []
    kw = dict(seed=1, shuffle_buffer=args.shuffle_buffer, num_parallel_reads=args.num_parallel_reads)
    steady: dict[str, list[float]] = {"raw": [], "mixture": []}
    makers = {"raw": lambda: raw_mixture_dataset(dirs, args.batch_size, tfdata.DEFAULT_READ_BUFFER_BYTES),
              "mixture": lambda: tfdata.make_dataset(mix, args.batch_size, num_steps=None, **kw)}
    for _ in range(args.repeats):
        start = time.perf_counter()
        next(iter(tfdata.make_dataset(mix, args.batch_size, num_steps=1, **kw)))
        first_batch.append(time.perf_counter() - start)
        for name, make in makers.items():
            t, sec = drain(make(), args.max_batches)
            results[name].append(t / sec)
            # Steady state: a fresh run of twice the batches, less the first run: start-up cancels.
            t2, sec2 = drain(make(), 2 * args.max_batches)
            steady[name].append((t2 - t) / max(sec2 - sec, 1e-9))
    summary = {name: statistics.median(v) for name, v in results.items()}
    summary["ratio_mixture_vs_raw"] = summary["mixture"] / summary["raw"]
    summary["steady"] = {name: statistics.median(v) for name, v in steady.items()}
    summary["ratio_steady"] = summary["steady"]["mixture"] / summary["steady"]["raw"]
    summary["first_batch_s"], summary["first_batch_max_s"] = statistics.median(first_batch), max(first_batch)
    for name, v in results.items():
        print(f"{name:8s} {summary[name] / 1e6:8.1f} M tokens/s   runs of {args.max_batches} batches from the "
              "start: " + ", ".join(f"{x / 1e6:.1f}" for x in v))
    for name, v in steady.items():
        print(f"{name:8s} {summary['steady'][name] / 1e6:8.1f} M tokens/s   steady (batches {args.max_batches}.."
              f"{2 * args.max_batches} of a run): " + ", ".join(f"{x / 1e6:.1f}" for x in v))
    print(f"mixture / raw: {summary['ratio_mixture_vs_raw']:.2f}x from the start, {summary['ratio_steady']:.2f}x "
          f"steady; first batch: median {summary['first_batch_s']:.2f} s, max {summary['first_batch_max_s']:.2f} s")
    global_batch = 8 * args.batch_size
    steps = total // global_batch
    per_rank = {}
    for w in [int(x) for x in args.world_sizes.split(",")]:
        read = []
        for rank in range(w):
            ds = tfdata.make_dataset(mix, global_batch_size=global_batch, dp_rank=rank, dp_size=w, num_steps=steps,
                                     **kw)
            before = bytes_read()
            ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
            read.append(bytes_read() - before)
        used = steps * (global_batch // w) * record_bytes
        per_rank[w] = {"read_mib_max": max(read) / 2**20, "read_over_used": max(read) / used}
        print(f"W={w}: bytes read per rank {per_rank[w]['read_mib_max']:.1f} MiB max = "
              f"{per_rank[w]['read_over_used']:.3f}x the records it uses ({steps} steps of {global_batch})")
    summary["bytes_per_rank"] = per_rank
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "summary": summary}, f, indent=1)
    return summary


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", help="existing output dir (default: write synthetic shards)")
    p.add_argument("--workdir", default="/tmp/bench_reader")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--records_per_shard", type=int, default=2500)
    p.add_argument("--seq_len", type=int, default=2048)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--max_batches", type=int, default=6000, help="batches per timed run (epochs repeat)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shuffle_buffer", type=int, default=None, help="records per window (default: the reader's)")
    p.add_argument("--num_parallel_reads", type=int, default=tfdata.DEFAULT_PARALLEL_READS)
    p.add_argument("--world_sizes", default="1,2,8", help="world sizes for the bytes-read measurement")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--mixture_sources", type=int, default=0, help="benchmark a mixture of this many sources instead")
    args = p.parse_args(argv)
    if args.mixture_sources:
        return mixture_main(args)

    out = args.manifest or write_synthetic(
        os.path.join(args.workdir, f"L{args.seq_len}"), args.shards, args.records_per_shard, args.seq_len
    )
    m = manifest_lib.load_manifest(out)
    total_bytes = sum(s["bytes"] for s in m["shards"])
    print(
        f"shards: {len(m['shards'])} x ~{m['shards'][0]['records']} records, seq_len {m['seq_len']}, "
        f"{total_bytes / 2**20:.0f} MiB; batch {args.batch_size}; cpus {os.cpu_count()}; TF {tf.__version__}"
    )
    epoch_batches = sum(s["records"] for s in m["shards"]) // args.batch_size
    drain(raw_dataset(out, args.batch_size, tfdata.DEFAULT_READ_BUFFER_BYTES, None), epoch_batches)  # warm cache

    results: dict[str, list[float]] = {"raw": [], "raw_parallel": [], "reader": [], "reader_noshuffle": []}
    cpu: dict[str, list[float]] = {name: [] for name in results}
    first_batch: list[float] = []

    rss: dict[str, list[float]] = {name: [] for name in results}

    def timed(name, ds):
        c = time.process_time()
        t, s = drain(ds, args.max_batches)
        results[name].append(t / s)
        cpu[name].append((time.process_time() - c) / t * 1e9)  # CPU microseconds per 1000 tokens
        rss[name].append(rss_mib())

    for _ in range(args.repeats):
        # Time to first batch: a fresh reader, manifest checks and graph building included.
        start = time.perf_counter()
        ds = tfdata.make_dataset(
            out, args.batch_size, seed=1, shuffle_buffer=args.shuffle_buffer, num_parallel_reads=args.num_parallel_reads
        )
        next(iter(ds))
        first_batch.append(time.perf_counter() - start)
        timed("raw", raw_dataset(out, args.batch_size, tfdata.DEFAULT_READ_BUFFER_BYTES, None))
        timed(
            "raw_parallel", raw_dataset(out, args.batch_size, tfdata.DEFAULT_READ_BUFFER_BYTES, args.num_parallel_reads)
        )
        timed(
            "reader",
            tfdata.make_dataset(
                out,
                args.batch_size,
                seed=1,
                shuffle_buffer=args.shuffle_buffer,
                num_parallel_reads=args.num_parallel_reads,
                num_epochs=None,
            ),
        )
        timed(
            "reader_noshuffle",
            tfdata.make_dataset(
                out,
                args.batch_size,
                shuffle=False,
                shuffle_buffer=args.shuffle_buffer,
                num_parallel_reads=args.num_parallel_reads,
                num_epochs=None,
            ),
        )

    summary = {name: statistics.median(v) for name, v in results.items()}
    summary["ratio_reader_vs_raw"] = summary["reader"] / summary["raw"]
    summary["ratio_reader_vs_raw_parallel"] = summary["reader"] / summary["raw_parallel"]
    summary["first_batch_s"] = statistics.median(first_batch)
    summary["first_batch_max_s"] = max(first_batch)
    for name in results:
        summary[f"{name}_cpu_us_per_ktok"] = statistics.median(cpu[name])
        summary[f"{name}_rss_mib_max"] = max(rss[name])
        print(
            f"{name:18s} {summary[name] / 1e6:8.1f} M tokens/s   {summary[name + '_cpu_us_per_ktok']:6.1f} "
            "CPU-us per 1k tokens   runs (M tokens/s): " + ", ".join(f"{v / 1e6:.1f}" for v in results[name])
        )
    print(
        f"reader / raw: {summary['ratio_reader_vs_raw']:.2f}x; reader / raw (parallel reads): "
        f"{summary['ratio_reader_vs_raw_parallel']:.2f}x"
    )
    print(f"time to first batch: median {summary['first_batch_s']:.2f} s, max {summary['first_batch_max_s']:.2f} s")
    print(
        "process RSS after each path's runs (MiB, max): "
        + ", ".join(f"{name} {summary[name + '_rss_mib_max']:.0f}" for name in results)
    )
    world_sizes = [int(w) for w in args.world_sizes.split(",")]
    per_rank = bytes_per_rank(out, 8 * args.batch_size, world_sizes, args.shuffle_buffer, args.num_parallel_reads)
    summary["bytes_per_rank"] = per_rank
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "cpu": cpu, "rss": rss, "summary": summary}, f, indent=1)
    return summary


if __name__ == "__main__":
    main()
