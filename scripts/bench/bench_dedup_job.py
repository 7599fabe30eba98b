"""The wall time `--dedup near` adds to a job, side by side in one run, and its shuffle bytes per document.

    PYTHONPATH=. python scripts/bench/bench_dedup_job.py CORPUS_DIR MODEL [--backend auto] [--workers 2] [--repeats 1]

Runs `pile-pipeline run` on CORPUS_DIR/train/*.jsonl.zst without dedup and with `--dedup near`,
alternating (so that both see the same machine load), on DirectRunner with --workers processes,
and prints each wall time. Then encodes, with Beam's default coder (what the runner shuffles), the
elements each document puts through the dedup stage's shuffles: the exact-dedup group (the
document), the 7 band keys, the signature join and the near group (the document's fields without
its text, and its signature), and the join of the removals with the chunks (the chunk's lines once more); a
duplicate's cluster edges add a few dozen bytes per round, left out (they scale with duplicates,
not documents).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import tempfile
import time
import typing

import apache_beam as beam
import numpy as np

from pipeline.cli import run
from pipeline.core import dedup, minhash, ngrams
from pipeline.io import inputs


def _job(corpus: str, model: str, out: str, backend: str, workers: int, near: bool) -> float:
    argv = ["--input", os.path.join(corpus, "train", "*.jsonl.zst"), "--output_dir", out, "--tokenizer_model",
            model, "--tokenizer_backend", backend, "--overwrite", "--progress_every", "0",
            "--runner", "DirectRunner", "--direct_num_workers", str(workers),
            "--direct_running_mode", "multi_processing" if workers > 1 else "in_memory"]
    if near:
        argv += ["--dedup", "near"]
    start = time.monotonic()
    manifest = run.main(argv)
    seconds = time.monotonic() - start
    removed = manifest.get("removed", {}).get("by_reason", {})
    print(f"{'--dedup near' if near else 'no dedup':>14}: {seconds:7.1f} s wall, "
          f"{manifest['totals']['documents_kept']:,} documents kept, removed {removed}", flush=True)
    return seconds


def shuffle_bytes(corpus: str, limit: int = 2000) -> dict:
    """Mean encoded bytes per document of each dedup shuffle, over the corpus's first `limit` documents."""
    coder = beam.coders.registry.get_coder(typing.Any)
    hasher = minhash.MinHasher(128, 1)
    keys = hasher.keys
    sizes: dict[str, list[int]] = {"exact group (document)": [], "band keys (7)": [], "signature join": [],
                                   "near group (document, signature)": [], "chunk join (the line)": []}
    seen = 0
    for path in sorted(glob.glob(os.path.join(corpus, "train", "*.jsonl.zst"))):
        for chunk in inputs.iter_chunks(path, 0, 4 << 20, 64 << 20):
            for line in chunk.lines:
                doc_json = json.loads(line.data)
                doc = {"text": doc_json["text"], "subset": doc_json["meta"]["pile_set_name"], "chunk": 0}
                key = dedup.order_key(0, line.number)
                sizes["exact group (document)"].append(len(coder.encode((b"k" * 16, (key, doc)))))
                sig = hasher.signature(ngrams.shingles(doc["text"], 5), keys)
                bands = minhash.band_keys(sig, 7, 18).tolist()
                sizes["band keys (7)"].append(sum(len(coder.encode((b, key))) for b in bands))
                sizes["signature join"].append(len(coder.encode((key, ("one", sig.tobytes())))))
                no_text = {n: v for n, v in doc.items() if n != "text"}  # the job's Dedup(keep_text=False)
                sizes["near group (document, signature)"].append(
                    len(coder.encode((key, ("doc", no_text)))) + len(coder.encode((key, ("sig", sig.tobytes())))))
                sizes["chunk join (the line)"].append(len(line.data) + 8)
                seen += 1
                if seen >= limit:
                    return {name: float(np.mean(v)) for name, v in sizes.items()}
    return {name: float(np.mean(v)) for name, v in sizes.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("model")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for near in (False, True):
                times[near].append(_job(args.corpus, args.model, os.path.join(tmp, "out"), args.backend,
                                        args.workers, near))
    base, near = min(times[False]), min(times[True])
    print(f"extra wall time of --dedup near: {near - base:.1f} s ({(near - base) / base:.0%} of the run without it)")
    per_doc = shuffle_bytes(args.corpus)
    for name, value in per_doc.items():
        print(f"  {name:>34}: {value:9.0f} bytes per document")
    print(f"  {'total':>34}: {sum(per_doc.values()):9.0f} bytes per document")


if __name__ == "__main__":
    main()
