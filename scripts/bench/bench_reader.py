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
    python scripts/bench/bench_reader.py --store               # read-time packing from a document store

Target: reader >= 0.8x raw, first batch < 2 s, each rank reading ~1/W of the output. A mixture:
scripts/bench/bench_reader_mixture.py; a document store: scripts/bench/bench_reader_store.py; what
they share: scripts/bench/reader_common.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import tensorflow as tf
from bench_reader_mixture import mixture_main
from bench_reader_store import store_main
from reader_common import bytes_read, drain, raw_dataset, rss_mib, write_synthetic

from pipeline import tfdata
from pipeline.format import manifest as manifest_lib


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
    p.add_argument("--store", action="store_true", help="benchmark read-time packing from a document store instead")
    p.add_argument("--store_scale", type=float, default=4.0, help="--store: the corpus's sample_corpus.py --scale")
    p.add_argument("--store_seq_lens", default="2048,8192", help="--store: the seq_lens compared")
    p.add_argument("--big_documents", type=int, default=1_000_000, help="--store: documents of the big store")
    p.add_argument("--loop_only", action="store_true", help="--store: only the two readers, inside TensorFlow and "
                   "in a Python loop")
    args = p.parse_args(argv)
    if args.mixture_sources:
        return mixture_main(args)
    if args.store:
        return store_main(args)

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
