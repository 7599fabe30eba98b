"""datatrove's MinHash stages with our parameters: on planted_duplicates.py's corpus (pairs.txt) or for timing.

Runs in its own virtual env (datatrove is not a dependency of this project):

    python3 -m venv .venv-datatrove && .venv-datatrove/bin/pip install datatrove==0.10.1
    .venv-datatrove/bin/python scripts/bench/datatrove_minhash.py PLANTED_DIR DT_DIR [--tasks 2]
    .venv/bin/python scripts/bench/planted_duplicates.py PLANTED_DIR --score_datatrove DT_DIR
    .venv-datatrove/bin/python scripts/bench/datatrove_minhash.py JSONL_DIR DT_DIR --glob '*.jsonl' --filter

Parameters equal to ours: word 5-grams, 7 buckets of 18 hashes (126 of our 128 permutations: the
same bands), seed 1; its own hash (sha1, 64-bit) and text normalization (lower-case, punctuation
removed, whitespace collapsed; ours: lower-case words of \\w characters) differ. pairs.txt (one
input file only: a document's index is then its line): one "removed_id kept_id" a line, the kept
id being its cluster's smallest document id (datatrove keeps one per cluster by its own rule: only
cluster membership is compared). With --filter, the fourth stage too: the input read again and the
kept documents written to DT_DIR/kept (what a whole dedup job does). The last line printed is
`STAGES {json}`: each stage's wall seconds, for bench_dedup_job.py. DT_DIR must be new: datatrove
skips the tasks its logs mark done.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import time

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("input_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--tasks", type=int, default=1)
    ap.add_argument("--glob", default="corpus.jsonl", help="input files under input_dir")
    ap.add_argument("--filter", action="store_true", help="also run the fourth stage (write the kept documents)")
    args = ap.parse_args()
    config = MinhashConfig(n_grams=5, num_buckets=7, hashes_per_bucket=18, seed=1,
                           hash_config=HashConfig(precision=64, hash_fc="sha1"))
    out = os.path.abspath(args.out_dir)
    if os.path.exists(f"{out}/logs"):
        raise SystemExit(f"{out}/logs exists: datatrove would skip the tasks it marks done; give a new DT_DIR")

    def reader():
        return JsonlReader(os.path.abspath(args.input_dir), glob_pattern=args.glob, text_key="text", id_key="id")

    stages: dict[str, float] = {}

    def timed(name, executor):
        start = time.monotonic()
        executor.run()
        stages[name] = round(time.monotonic() - start, 2)

    timed("signatures", LocalPipelineExecutor([reader(), MinhashDedupSignature(f"{out}/signatures", config=config)],
                                              tasks=args.tasks, workers=args.tasks,
                                              logging_dir=f"{out}/logs/signatures"))
    timed("buckets", LocalPipelineExecutor([MinhashDedupBuckets(f"{out}/signatures", f"{out}/buckets", config=config)],
                                           tasks=config.num_buckets, workers=args.tasks,
                                           logging_dir=f"{out}/logs/buckets"))
    timed("cluster", LocalPipelineExecutor([MinhashDedupCluster(f"{out}/buckets", f"{out}/remove_ids", config=config,
                                                                save_cluster_id=True)],
                                           tasks=1, logging_dir=f"{out}/logs/clusters"))
    if args.filter:  # as many tasks as the signature stage: the remove ids are per task
        timed("filter", LocalPipelineExecutor([reader(), MinhashDedupFilter(f"{out}/remove_ids"),
                                               JsonlWriter(f"{out}/kept")],
                                              tasks=args.tasks, workers=args.tasks, logging_dir=f"{out}/logs/filter"))
    # (doc index, cluster id) pairs of every document in a cluster
    clusters: dict[int, list[int]] = {}
    for name in sorted(os.listdir(f"{out}/remove_ids")):
        if name.endswith(".clusters"):
            data = open(f"{out}/remove_ids/{name}", "rb").read()
            for doc, cluster in struct.iter_unpack("<II", data):
                clusters.setdefault(cluster, []).append(doc)
    removed = sum(len(m) - 1 for m in clusters.values())
    if args.glob == "corpus.jsonl":  # one input file: doc index = line = id
        with open(f"{out}/pairs.txt", "w") as f:
            for members in clusters.values():
                first = min(members)
                f.writelines(f"{m} {first}\n" for m in sorted(members) if m != first)
        print(f"{out}/pairs.txt: {removed} removed in {len(clusters)} clusters")
    print("STAGES " + json.dumps({**stages, "removed": removed, "clusters": len(clusters)}), flush=True)


if __name__ == "__main__":
    main()
