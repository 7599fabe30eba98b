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
mixture's: the blend, per-source streams and windows (pipeline/reader/engine/mixture.py). Bytes per rank
are counted over as many steps as the sources hold records.

With --mixture_sources, each path is also timed in its steady state: a fresh run of twice
--max_batches, less the first run, so that the start (the mixture's plan, graph building; its own
figure, time to first batch) cancels out.

Target: reader >= 0.8x raw, first batch < 2 s, each rank reading ~1/W of the output.

With --store: read-time packing from a document store (`--output_format megatron`) against the
pre-packed TFRecord reader over the same tokens: the job writes, from one corpus (sample_corpus.py
--scale --store_scale), the store and the TFRecord outputs (concat and best_fit, each seq_len of
--store_seq_lens); then, alternating the two paths, rank 0's tokens/s (label positions) for 1 and 4
ranks of --batch_size sequences each; the PyTorch reader against tf.data; the first batch and the
memory (RssAnon) of a store of --big_documents short documents (also written by the job) and of
the small one: bounded by the window, not by the store. Targets: >= 0.8x, < 2 s, bounded.
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
    the dataset would add Python's cost to every batch and cap both paths at the same rate.
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


def _job(inputs: str, out: str, model: str, *extra: str) -> str:
    """Run the job once into `out` (kept: a later run of the benchmark reuses it)."""
    import subprocess

    if not os.path.exists(manifest_lib.manifest_path(out)):
        cmd = [sys.executable, "-m", "pipeline.run", "--input", inputs, "--output_dir", out, "--tokenizer_model",
               model, "--runner", "DirectRunner", "--direct_num_workers", "2", *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def _short_documents(path: str, n: int) -> str:
    """A corpus of n short documents (5-40 words each), written once."""
    import random

    import zstandard

    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        rng = random.Random(5)
        words = "the of data model river court paper song city north energy signal market group".split()
        lines = (json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(5, 40))),
                             "meta": {"pile_set_name": "Pile-CC"}}) for _ in range(n))
        with open(path + ".tmp", "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as z:
            for line in lines:
                z.write(line.encode() + b"\n")
        os.rename(path + ".tmp", path)
    return path


def rss_anon_mib() -> float:
    """Anonymous resident memory of this process (Linux), MiB: what the reader holds, not the page cache."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon:"))


def store_main(args) -> dict:
    """Read-time packing from a store against the pre-packed reader over the same tokens (module docstring)."""
    import torch

    from pipeline.pytorch import StoreDataset

    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tokenizers", "sample",
                         "sample.model")
    corpus = os.path.join(args.workdir, f"corpus{args.store_scale:g}")
    if not os.path.exists(os.path.join(corpus, "val.jsonl.zst")):
        from sample_corpus import write_sample_corpus

        write_sample_corpus(corpus, train_files=4, docs_per_file=600, scale=args.store_scale)
    inputs = os.path.join(corpus, "train", "*.jsonl.zst")
    store = _job(inputs, os.path.join(corpus, "store"), model, "--output_format", "megatron")
    lens = [int(x) for x in args.store_seq_lens.split(",")]
    packed = {(p, n): _job(inputs, os.path.join(corpus, f"{p}{n}"), model, "--seq_len", str(n), "--packing", p)
              for p in ("concat", "best_fit") for n in lens}
    meta = json.loads(open(manifest_lib.manifest_path(store)).read())
    print(f"store: {meta['totals']['documents']} documents, {meta['totals']['tokens'] / 1e6:.1f} M tokens, "
          f"{len(meta['shards'])} pairs; batch {args.batch_size} per rank; cpus {os.cpu_count()}; TF {tf.__version__}; "
          f"torch {torch.__version__}")
    table = []
    for (packing, n), out in packed.items():
        for w in (1, 4):
            g = args.batch_size * w
            paths = {
                "pre-packed": lambda out=out, g=g, w=w: tfdata.make_dataset(
                    out, global_batch_size=g, dp_rank=0, dp_size=w, seed=1, num_epochs=None),
                # The same features as the pre-packed output's (concat: written without boundaries).
                "read-time": lambda n=n, g=g, w=w, packing=packing: tfdata.make_dataset(
                    store, global_batch_size=g, dp_rank=0, dp_size=w, seed=1, seq_len=n, packing=packing,
                    num_epochs=None, features=None if packing == "best_fit" else ()),
            }
            rates: dict[str, list[float]] = {k: [] for k in paths}
            cpu: dict[str, list[float]] = {k: [] for k in paths}
            batches = max(50, args.max_batches * 2048 // n)
            for _ in range(args.repeats):
                for name, make in paths.items():
                    c = time.process_time()
                    t, sec = drain(make(), batches)
                    rates[name].append(t / sec)
                    cpu[name].append((time.process_time() - c) / t * 1e9)  # CPU-us per 1k tokens
            row = {k: statistics.median(v) for k, v in rates.items()}
            row.update({f"{k}_cpu": statistics.median(v) for k, v in cpu.items()})
            row.update(packing=packing, seq_len=n, ranks=w, ratio=row["read-time"] / row["pre-packed"],
                       cpu_ratio=row["pre-packed_cpu"] / row["read-time_cpu"])
            table.append(row)
            print(f"{packing:8s} seq_len {n:5d} W={w}: pre-packed {row['pre-packed'] / 1e6:6.1f} M tokens/s "
                  f"({row['pre-packed_cpu']:.1f} CPU-us/1k), read-time {row['read-time'] / 1e6:6.1f} M tokens/s "
                  f"({row['read-time_cpu']:.1f}) = {row['ratio']:.2f}x ({row['cpu_ratio']:.2f}x in CPU)   runs: "
                  + " | ".join(f"{k} " + ", ".join(f"{x / 1e6:.1f}" for x in v) for k, v in rates.items()))

    def torch_rate(batches: int, workers: int) -> float:
        from torch.utils.data import DataLoader

        ds = StoreDataset(store, global_batch_size=args.batch_size, seq_len=lens[0], seed=1)
        start, tokens = time.perf_counter(), 0
        for i, b in enumerate(DataLoader(ds, batch_size=None, num_workers=workers)):
            tokens += b["labels"].numel()
            if i + 1 == batches:
                break
        return tokens / (time.perf_counter() - start)

    # The same batches, segment ids and positions included; PyTorch in the process and with 2 workers.
    rates: dict[str, list[float]] = {"tf.data": [], "PyTorch": [], "PyTorch, 2 workers": []}
    for _ in range(args.repeats):
        t, sec = drain(tfdata.make_dataset(store, global_batch_size=args.batch_size, seed=1, seq_len=lens[0],
                                           num_epochs=None), args.max_batches)
        rates["tf.data"].append(t / sec)
        rates["PyTorch"].append(torch_rate(args.max_batches, 0))
        rates["PyTorch, 2 workers"].append(torch_rate(args.max_batches, 2))
    summary: dict = {"table": table, **{k: statistics.median(v) for k, v in rates.items()}}
    print(f"concat seq_len {lens[0]}, W=1: " + ", ".join(
        f"{k} {summary[k] / 1e6:.1f} M tokens/s ({summary[k] / summary['tf.data']:.2f}x)" for k in rates)
        + "   runs: " + " | ".join(", ".join(f"{x / 1e6:.1f}" for x in v) for v in rates.values()))

    big_inputs = _short_documents(os.path.join(args.workdir, f"short{args.big_documents}", "docs.jsonl.zst"),
                                  args.big_documents)
    big = _job(big_inputs, os.path.join(args.workdir, f"short{args.big_documents}", "store"), model,
               "--output_format", "megatron")
    big_meta = json.loads(open(manifest_lib.manifest_path(big)).read())
    firsts = {"tf.data": [], "PyTorch": []}
    for _ in range(args.repeats):
        start = time.perf_counter()
        next(iter(tfdata.make_dataset(big, global_batch_size=args.batch_size, seed=1, seq_len=lens[0])))
        firsts["tf.data"].append(time.perf_counter() - start)
        start = time.perf_counter()
        next(iter(StoreDataset(big, global_batch_size=args.batch_size, seq_len=lens[0], seed=1)))
        firsts["PyTorch"].append(time.perf_counter() - start)
    summary["first_batch"] = {k: (statistics.median(v), max(v)) for k, v in firsts.items()}
    print(f"first batch, store of {big_meta['totals']['documents']:,} documents: "
          + ", ".join(f"{k} median {m:.2f} s max {x:.2f} s" for k, (m, x) in summary["first_batch"].items()))
    memory = {}
    for name, location in (("small", store), ("big", big)):
        ds = StoreDataset(location, global_batch_size=args.batch_size, seq_len=lens[0], seed=1, num_epochs=None)
        it = iter(ds)
        next(it)
        before = rss_anon_mib()
        for _ in range(args.max_batches):
            next(it)
        memory[name] = {"documents": json.loads(open(manifest_lib.manifest_path(location)).read())["totals"][
            "documents"], "after_first": before, "after_run": rss_anon_mib()}
    summary["memory"] = memory
    for name, m in memory.items():
        print(f"memory, {name} store ({m['documents']:,} documents): RssAnon {m['after_first']:.0f} MiB after the "
              f"first batch, {m['after_run']:.0f} MiB after {args.max_batches} more")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary}, f, indent=1)
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
    p.add_argument("--store", action="store_true", help="benchmark read-time packing from a document store instead")
    p.add_argument("--store_scale", type=float, default=4.0, help="--store: the corpus's sample_corpus.py --scale")
    p.add_argument("--store_seq_lens", default="2048,8192", help="--store: the seq_lens compared")
    p.add_argument("--big_documents", type=int, default=1_000_000, help="--store: documents of the big store")
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
