"""Benchmark read-time packing (`bench_reader.py --store`): a document store against the pre-packed reader.

The job writes, from one corpus (sample_corpus.py --scale --store_scale), the store and the
TFRecord outputs (concat and best_fit, each seq_len of --store_seq_lens); then, alternating the two
paths, rank 0's tokens/s (label positions) for 1 and 4 ranks of --batch_size sequences each; the
same two read in a plain Python loop (`drain_loop`) beside inside TensorFlow (`drain`); the
PyTorch reader against tf.data; the first batch and the memory (RssAnon) of a store of
--big_documents short documents (also written by the job) and of the small one: bounded by the
window, not by the store. Targets: >= 0.8x, < 2 s, bounded.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import tensorflow as tf
from reader_common import drain, drain_loop, rss_anon_mib

from pipeline import tfdata
from pipeline.format import manifest as manifest_lib


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


def compare(args, store: str, packed: dict, ranks, drainer, how: str) -> list[dict]:
    """Pre-packed against read-time over the same tokens: rank 0's tokens/s and CPU per token, alternating.

    `packed`: {(packing, seq_len): the pre-packed output}; `drainer`: how batches are consumed
    (`drain`: inside TensorFlow; `drain_loop`: a Python loop).
    """
    table = []
    for (packing, n), out in packed.items():
        for w in ranks:
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
                    t, sec = drainer(make(), batches)
                    rates[name].append(t / sec)
                    cpu[name].append((time.process_time() - c) / t * 1e9)  # CPU-us per 1k tokens
            row = {k: statistics.median(v) for k, v in rates.items()}
            row.update({f"{k}_cpu": statistics.median(v) for k, v in cpu.items()})
            row.update(packing=packing, seq_len=n, ranks=w, how=how, ratio=row["read-time"] / row["pre-packed"],
                       cpu_ratio=row["pre-packed_cpu"] / row["read-time_cpu"])
            table.append(row)
            print(f"{how}: {packing:8s} seq_len {n:5d} W={w}: pre-packed {row['pre-packed'] / 1e6:6.1f} M tokens/s "
                  f"({row['pre-packed_cpu']:.1f} CPU-us/1k), read-time {row['read-time'] / 1e6:6.1f} M tokens/s "
                  f"({row['read-time_cpu']:.1f}) = {row['ratio']:.2f}x ({row['cpu_ratio']:.2f}x in CPU)   runs: "
                  + " | ".join(f"{k} " + ", ".join(f"{x / 1e6:.1f}" for x in v) for k, v in rates.items()))
    return table


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
    first = {k: v for k, v in packed.items() if k[1] == lens[0]}
    table = compare(args, store, first if args.loop_only else packed, (1,) if args.loop_only else (1, 4), drain,
                    "inside TensorFlow")
    # The same, consumed by a plain Python loop (each batch to NumPy), as an eager training loop does.
    loop = compare(args, store, first, (1,), drain_loop, "Python loop")
    if args.loop_only:
        return {"table": table, "loop": loop}

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
    summary: dict = {"table": table, "loop": loop, **{k: statistics.median(v) for k, v in rates.items()}}
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
