"""What `--dedup near` costs, side by side in one run: the job with and without it, the dedup alone, datatrove's stages.

    PYTHONPATH=. python scripts/bench/bench_dedup_job.py CORPUS_DIR MODEL [--files 4] [--scales 1 4] [--rounds 2]
        [--growth_rounds 1] [--datatrove_rounds 1] [--star_rounds N] [--backend auto] [--workers 2]
        [--datatrove .venv-datatrove/bin/python]

CORPUS_DIR/train/*.jsonl.zst, sorted: scale k takes the first k x --files files (so a corpus of
`real_text_corpus.py --max_mb 120 --train_files 16` gives 1x = 30 MB in 4 files and 4x = 120 MB in
16, real text throughout: no document repeated). In every round, at every scale, in this order:

- `job`:        `python -m pipeline.run` without dedup, a whole command in a fresh process as a user
                runs it (Beam's import and the tokenizer's self-check included; DirectRunner, --workers
                workers in the running mode the job picks: threads for `auto`; --backend);
- `job+near`:   the same with `--dedup near` (exact, then MinHash LSH 7 x 18 over word 5-grams);
- `dedup`:      our Dedup PTransform alone (exact + near, as the job runs it: `keep_text=False`) on the
                same documents, read from the .jsonl.zst files, in a Beam pipeline on the same runner,
                the removed records written as JSON lines;
- `datatrove`:  datatrove's four MinHash stages (signatures, buckets, cluster, filter writing the kept
                documents), --workers tasks (the cluster stage is one task by design), the same
                parameters (scripts/bench/datatrove_minhash.py), in its own venv. It reads the same
                lines decompressed to .jsonl beforehand, outside the timing (ours decompresses zstd
                inside it). Left out without --datatrove; at the first scale only, in the last
                --datatrove_rounds rounds (default 1: its signatures take minutes).
- `dedup r=N`:  with --star_rounds N, the dedup alone with N star rounds instead of 8 (what the
                DirectRunner graph's fixed steps cost), at the first scale only.

Scales after the first run job, job+near and dedup in the last --growth_rounds rounds only (they
take most of the time). Each figure is the fastest of its rounds. Printed: a table of wall
seconds, the extra time of `--dedup near` (job+near - job) per scale and its growth from the first
scale to the last, and the mean bytes per document that each of the dedup stage's shuffles moves,
as the job packs it (bucket pairs in arrays, documents pickled in blocks, lines as they are), over the
first 2,000 documents.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

import apache_beam as beam
import numpy as np
import zstandard
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.beam.dedup.transform import Dedup
from pipeline.core import dedup, minhash, ngrams
from pipeline.io import inputs

DATATROVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datatrove_minhash.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _runner_args(workers: int) -> list[str]:
    return ["--runner", "DirectRunner", "--direct_num_workers", str(workers),
            "--direct_running_mode", "multi_processing" if workers > 1 else "in_memory"]


def _job(files: list[str], model: str, out: str, backend: str, workers: int, near: bool) -> tuple[float, str]:
    """`pile-pipeline run` as a user runs it: a whole command in a fresh process (Beam's import and the
    tokenizer's self-check included), DirectRunner in the running mode the job picks."""
    cmd = [sys.executable, "-m", "pipeline.run", "--input", *files, "--output_dir", out, "--tokenizer_model", model,
           "--tokenizer_backend", backend, "--overwrite", "--progress_every", "0", "--runner", "DirectRunner",
           "--direct_num_workers", str(workers)]
    if near:
        cmd += ["--dedup", "near"]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    removed = manifest.get("removed", {}).get("by_reason", {})
    return seconds, f"{manifest['totals']['documents_kept']:,} kept, removed {removed}"


def _documents(file_index: int, path: str):
    for chunk in inputs.iter_chunks(path, file_index, 4 << 20, 64 << 20):
        for line in chunk.lines:
            doc = json.loads(line.data)
            yield (file_index, line.number), {"text": doc["text"], "subset": doc["meta"]["pile_set_name"],
                                              "chunk": chunk.chunk_index}


def _dedup_only(files: list[str], out: str, workers: int, star_rounds: int) -> tuple[float, str]:
    start = time.monotonic()
    with beam.Pipeline(options=PipelineOptions(_runner_args(workers))) as p:
        removed = (p | beam.Create(list(enumerate(files)))
                   | "Reshuffle" >> beam.Reshuffle()  # one file per bundle, spread over the workers
                   | "Documents" >> beam.FlatMapTuple(_documents)
                   | Dedup(file_names=files, keep_text=False, rounds=star_rounds))["removed"]
        removed | beam.Map(json.dumps) | beam.io.WriteToText(os.path.join(out, "removed"))
    seconds = time.monotonic() - start
    reasons: dict[str, int] = {}
    for path in glob.glob(os.path.join(out, "removed*")):
        for line in open(path):
            reason = json.loads(line)["reason"]
            reasons[reason] = reasons.get(reason, 0) + 1
    return seconds, f"removed {reasons}"


def _decompressed(files: list[str], into: str) -> str:
    """The files' lines as plain .jsonl under `into` (for datatrove), once."""
    os.makedirs(into, exist_ok=True)
    for path in files:
        target = os.path.join(into, os.path.basename(path).removesuffix(".zst"))
        if not os.path.exists(target):
            with open(path, "rb") as src, open(target, "wb") as dst:
                zstandard.ZstdDecompressor().copy_stream(src, dst)
    return into


def _datatrove(python: str, jsonl_dir: str, out: str, workers: int) -> tuple[float, str]:
    start = time.monotonic()
    proc = subprocess.run([python, DATATROVE, jsonl_dir, out, "--glob", "*.jsonl", "--tasks", str(workers),
                           "--filter"], capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"datatrove failed:\n{proc.stderr[-3000:]}")
    stages = json.loads(proc.stdout.strip().splitlines()[-1].removeprefix("STAGES "))
    return seconds, ", ".join(f"{k} {v}" for k, v in stages.items())


def shuffle_bytes(files: list[str], limit: int = 2000) -> dict:
    """Mean encoded bytes per document of each dedup shuffle in the job, over the first `limit` documents."""
    hasher = minhash.MinHasher(128, 1)
    keys = hasher.keys
    # With exact and near dedup the exact key is one more bucket of the band group (pipeline/beam/dedup/transform.py).
    sizes: dict[str, list[int]] = {"bucket keys (exact + 7 bands)": [], "near group (key, fields, signature)": [],
                                   "chunk join (the line)": []}
    seen = 0
    block: list = []  # the near group's documents go in blocks of lines, pickled (pipeline/beam/dedup/transform.py)

    def means() -> dict:
        out = {name: float(np.mean(v)) for name, v in sizes.items() if v}
        pickled = pickle.dumps(block, protocol=pickle.HIGHEST_PROTOCOL)
        out["near group (key, fields, signature)"] = len(pickled) / len(block)
        return {name: out[name] for name in ("bucket keys (exact + 7 bands)", "near group (key, fields, signature)",
                                             "chunk join (the line)")}

    for path in files:
        for line in (line for chunk in inputs.iter_chunks(path, 0, 4 << 20, 64 << 20) for line in chunk.lines):
            doc_json = json.loads(line.data)
            doc = {"text": doc_json["text"], "subset": doc_json["meta"]["pile_set_name"], "chunk": 0}
            key = dedup.order_key(0, line.number)
            sig = hasher.signature(ngrams.shingles(doc["text"], 5), keys).tobytes()
            fields = {n: v for n, v in doc.items() if n != "text"}  # the job's Dedup(keep_text=False)
            # packed in partitions: 8 + 8 bytes a band's pair, 16 + 8 the exact key's (pipeline/beam/dedup/transform.py)
            sizes["bucket keys (exact + 7 bands)"].append(16 * 7 + 24)
            block.append((key, fields, sig))
            sizes["chunk join (the line)"].append(len(line.data) + 8)
            seen += 1
            if seen >= limit:
                return means()
    return means()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("model")
    parser.add_argument("--files", type=int, default=4, help="files at scale 1")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--growth_rounds", type=int, default=1, help="the last rounds that run the larger scales too")
    parser.add_argument("--datatrove_rounds", type=int, default=1, help="the last rounds that run datatrove")
    parser.add_argument("--star_rounds", type=int, default=None,
                        help="also time the dedup alone with this many star rounds (the default: 8), at scale 1")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--datatrove", default=None, help="the python of a venv with datatrove 0.10.1")
    args = parser.parse_args()
    every = sorted(glob.glob(os.path.join(args.corpus, "train", "*.jsonl.zst")))
    if len(every) < args.files * max(args.scales):
        raise SystemExit(f"{args.corpus}/train holds {len(every)} files; scale {max(args.scales)} needs "
                         f"{args.files * max(args.scales)}")
    kinds = ["job", "job+near", "dedup"] + ([f"dedup r={args.star_rounds}"] if args.star_rounds else []) + (
        ["datatrove"] if args.datatrove else [])
    growth = ["job", "job+near", "dedup"]  # datatrove's signatures (spaCy words) are its slow part: at scale 1 only
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = {}
        for scale in args.scales:
            files = every[: args.files * scale]
            mb = sum(os.path.getsize(f) for f in files) / 1e6
            if args.datatrove:
                jsonl[scale] = _decompressed(files, os.path.join(tmp, f"jsonl{scale}"))
            print(f"scale {scale}x: {len(files)} files, {mb:.1f} MB zstd", flush=True)
        for r in range(args.rounds):
            for scale in args.scales:
                if scale != args.scales[0] and r < args.rounds - args.growth_rounds:
                    continue
                files = every[: args.files * scale]
                for kind in kinds if scale == args.scales[0] else growth:
                    if kind == "datatrove" and r < args.rounds - args.datatrove_rounds:
                        continue
                    out = os.path.join(tmp, f"out-{kind}-{scale}-{r}")
                    if kind == "job":
                        seconds, what = _job(files, args.model, out, args.backend, args.workers, near=False)
                    elif kind == "job+near":
                        seconds, what = _job(files, args.model, out, args.backend, args.workers, near=True)
                    elif kind.startswith("dedup"):
                        seconds, what = _dedup_only(files, out, args.workers,
                                                    args.star_rounds if kind != "dedup" else 8)
                    else:
                        seconds, what = _datatrove(args.datatrove, jsonl[scale], out, args.workers)
                    shutil.rmtree(out, ignore_errors=True)
                    times.setdefault((kind, scale), []).append(seconds)
                    print(f"round {r + 1} {scale}x {kind:>10}: {seconds:7.1f} s  ({what})", flush=True)
    best = {k: min(v) for k, v in times.items()}
    print("\n| scale | " + " | ".join(kinds) + " | extra of --dedup near |")
    print("|---|" + "---:|" * (len(kinds) + 1))
    for scale in args.scales:
        extra = best["job+near", scale] - best["job", scale]
        print(f"| {scale}x | " + " | ".join(f"{best[k, scale]:.1f}" if (k, scale) in best else "" for k in kinds)
              + f" | {extra:+.1f} ({extra / best['job', scale]:+.0%}) |")
    first, last = args.scales[0], args.scales[-1]
    if last != first:
        grow = {k: best[k, last] / best[k, first] for k in growth}
        extra = (best["job+near", last] - best["job", last]) / max(best["job+near", first] - best["job", first], 1e-9)
        print(f"growth {first}x -> {last}x: " + ", ".join(f"{k} x{v:.2f}" for k, v in grow.items())
              + f", extra of --dedup near x{extra:.2f}")
    per_doc = shuffle_bytes(every[: args.files])
    for name, value in per_doc.items():
        print(f"  {name:>38}: {value:9.0f} bytes per document")
    print(f"  {'total':>38}: {sum(per_doc.values()):9.0f} bytes per document")


if __name__ == "__main__":
    main()
