"""The whole job with --packing concat against best_fit: documents cut, padding, records, wall time.

    python scripts/bench/bench_best_fit_job.py CORPUS_DIR MODEL [--seq_lens 2048,4096] [--rounds 3]
        [--work_dir /tmp/bench_best_fit] [-- extra pile-pipeline run flags]

1. Counts: one run per (seq_len, packing) with --provenance; a document is cut when its labels
   land in more than one record (from the provenance spans), "fitting" when it has at most seq_len
   tokens (EOS included). Padding: the manifest's padding_labels over records x seq_len.
2. Wall time: `pile-pipeline run` (a fresh process, default DirectRunner, no --provenance) per
   (seq_len, packing), the configurations interleaved in each of --rounds rounds so that the
   machine's load falls on all of them alike; the median and the best of the rounds.
Prints Markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# (name, flags): concat with document boundaries writes the same three arrays per record as best_fit.
MODES = {"concat": ["--packing", "concat"], "concat + boundaries": ["--packing", "concat", "--document_boundaries"],
         "best_fit": ["--packing", "best_fit"]}


def run_job(corpus: str, model: str, out: str, seq_len: int, mode: str, extra: list[str]) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "pipeline.cli.main", "run", "--input", os.path.join(corpus, "train", "*.jsonl.zst"),
            "--output_dir", out, "--tokenizer_model", model, "--seq_len", str(seq_len), *MODES[mode],
            "--overwrite", "--progress_every", "0", *extra]
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with open(os.path.join(out, "manifest.json")) as f:
        return seconds, json.load(f)


def cut_documents(out: str, manifest: dict, seq_len: int) -> tuple[int, int, int]:
    """(documents, cut, cut of those with at most seq_len tokens), from the provenance files."""
    rows = []  # (file, line, first record, last record, tokens)
    base = 0
    for path in sorted(glob.glob(os.path.join(out, "run-*", "provenance", "*.npz"))):
        with np.load(path) as z:
            spans, starts, counts = z["spans"], z["span_starts"], z["records"]
        for b in range(len(counts)):
            block = spans[starts[b]:starts[b + 1]]
            ends = np.cumsum(block[:, 3])
            begins = ends - block[:, 3]
            real = block[:, 0] >= 0  # best_fit's padding rows name no file
            rows.append(np.stack([block[:, 0], block[:, 1], base + begins // seq_len, base + (ends - 1) // seq_len,
                                  block[:, 3]], axis=1)[real])
            base += int(counts[b])
    table = np.concatenate(rows)
    docs: dict = {}
    for file_index, line, first, last, tokens in table.tolist():
        lo, hi, size = docs.get((file_index, line), (first, last, 0))
        docs[file_index, line] = (min(lo, first), max(hi, last), size + tokens)
    cut = [(hi > lo, size) for lo, hi, size in docs.values()]
    return len(docs), sum(c for c, _ in cut), sum(c and size <= seq_len for c, size in cut)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus")
    parser.add_argument("model")
    parser.add_argument("--seq_lens", default="2048,4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work_dir", default="/tmp/bench_best_fit")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    seq_lens = [int(s) for s in args.seq_lens.split(",")]
    configs = [(s, m) for s in seq_lens for m in MODES]
    counts = {}
    for seq_len, mode in configs:
        out = os.path.join(args.work_dir, f"{mode.replace(' + ', '-')}-{seq_len}-prov")
        _, manifest = run_job(args.corpus, args.model, out, seq_len, mode, ["--provenance", *extra])
        records = manifest["totals"]["records"]
        padding = manifest["packing"].get("padding_labels", 0)
        counts[seq_len, mode] = (*cut_documents(out, manifest, seq_len), padding / (records * seq_len), records)
        print(seq_len, mode, counts[seq_len, mode], flush=True)
    times: dict = {c: [] for c in configs}
    for r in range(args.rounds):
        for seq_len, mode in configs:
            out = os.path.join(args.work_dir, f"{mode.replace(' + ', '-')}-{seq_len}")
            seconds, _ = run_job(args.corpus, args.model, out, seq_len, mode, extra)
            times[seq_len, mode].append(seconds)
            print(f"round {r}: {seq_len} {mode} {seconds:.1f} s", flush=True)
    print("\n| seq_len | packing | documents cut | of them fitting | padding | records | wall s, median | best | "
          "median vs concat |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seq_len, mode in configs:
        docs, cut, fitting, pad, records = counts[seq_len, mode]
        median = statistics.median(times[seq_len, mode])
        base = statistics.median(times[seq_len, "concat"])
        print(f"| {seq_len} | {mode} | {100 * cut / docs:.1f}% | {100 * fitting / docs:.1f}% | {100 * pad:.2f}% | "
              f"{records:,} | {median:.1f} | {min(times[seq_len, mode]):.1f} | {100 * (median / base - 1):+.1f}% |")
    print(f"\n{docs:,} documents; rounds: {args.rounds}")


if __name__ == "__main__":
    main()
