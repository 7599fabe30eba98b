"""datatrove's four MinHash stages on planted_duplicates.py's corpus, with our parameters; writes pairs.txt.

Runs in its own virtual env (datatrove is not a dependency of this project):

    python3 -m venv .venv-datatrove && .venv-datatrove/bin/pip install datatrove==0.10.1
    .venv-datatrove/bin/python scripts/bench/datatrove_minhash.py PLANTED_DIR DT_DIR [--tasks 2]
    .venv/bin/python scripts/bench/planted_duplicates.py PLANTED_DIR --score_datatrove DT_DIR

Parameters equal to ours: word 5-grams, 7 buckets of 18 hashes (126 of our 128 permutations: the
same bands), seed 1; its own hash (sha1, 64-bit) and text normalization (lower-case, punctuation
removed, whitespace collapsed; ours: lower-case words of \\w characters) differ. pairs.txt: one
"removed_id kept_id" a line, the kept id being its cluster's smallest document id (datatrove keeps
one per cluster by its own rule: only cluster membership is compared).
"""

from __future__ import annotations

import argparse
import os
import struct

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupSignature,
)
from datatrove.pipeline.readers import JsonlReader
from datatrove.utils.hashing import HashConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("planted_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--tasks", type=int, default=1)
    args = ap.parse_args()
    config = MinhashConfig(n_grams=5, num_buckets=7, hashes_per_bucket=18, seed=1,
                           hash_config=HashConfig(precision=64, hash_fc="sha1"))
    out = os.path.abspath(args.out_dir)
    reader = JsonlReader(os.path.abspath(args.planted_dir), glob_pattern="corpus.jsonl", text_key="text", id_key="id")
    LocalPipelineExecutor([reader, MinhashDedupSignature(f"{out}/signatures", config=config)],
                          tasks=args.tasks, workers=args.tasks, logging_dir=f"{out}/logs/signatures").run()
    LocalPipelineExecutor([MinhashDedupBuckets(f"{out}/signatures", f"{out}/buckets", config=config)],
                          tasks=config.num_buckets, workers=args.tasks, logging_dir=f"{out}/logs/buckets").run()
    LocalPipelineExecutor([MinhashDedupCluster(f"{out}/buckets", f"{out}/remove_ids", config=config,
                                               save_cluster_id=True)],
                          tasks=1, logging_dir=f"{out}/logs/clusters").run()
    # (doc index, cluster id) pairs of every document in a cluster; one input file: doc index = line = id
    clusters: dict[int, list[int]] = {}
    for name in sorted(os.listdir(f"{out}/remove_ids")):
        if name.endswith(".clusters"):
            data = open(f"{out}/remove_ids/{name}", "rb").read()
            for doc, cluster in struct.iter_unpack("<II", data):
                clusters.setdefault(cluster, []).append(doc)
    with open(f"{out}/pairs.txt", "w") as f:
        for members in clusters.values():
            first = min(members)
            f.writelines(f"{m} {first}\n" for m in sorted(members) if m != first)
    print(f"{out}/pairs.txt: {sum(len(m) - 1 for m in clusters.values())} removed in {len(clusters)} clusters")


if __name__ == "__main__":
    main()
