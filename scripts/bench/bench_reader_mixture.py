"""Benchmark a mixture of outputs (`bench_reader.py --mixture_sources N`): the mixture's reader against raw reads.

N synthetic outputs of different sizes (--records_per_shard x 1..4 records each, one shard), mixed
with the `tokens` preset (each source in proportion to its records); raw reads the same N shards
through one TFRecordDataset. The reader's path is the mixture's: the blend, per-source streams and
windows (pipeline/reader/engine/mixture.py). Bytes per rank are counted over as many steps as the
sources hold records. Each path is also timed in its steady state: a fresh run of twice
--max_batches, less the first run, so that the start (the mixture's plan, graph building; its own
figure, time to first batch) cancels out.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import tensorflow as tf
from reader_common import _raw, bytes_read, drain

from pipeline import tfdata
from pipeline.format import manifest as manifest_lib


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
