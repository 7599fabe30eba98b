"""Real text with planted near-duplicates at known edit rates, and the precision/recall of near dedup on it.

    python scripts/bench/planted_duplicates.py OUT_DIR [--docs 2000] [--copies 600] [--seed 0]   # write the corpus
    python scripts/bench/planted_duplicates.py OUT_DIR --evaluate [--runner_args ...]          # run Dedup, score it
    python scripts/bench/planted_duplicates.py OUT_DIR --score_datatrove DT_OUTPUT_DIR  # score datatrove's clusters

The base documents are real text from this machine (scripts/bench/real_text_corpus.py's streams, documents
of 50 words to 20,000 characters). Each planted copy takes a base document and edits a known share
of its words (substitute, delete or insert a word, one third each), at the rates in RATES; copies
are appended after the base documents. OUT_DIR gets:

  corpus.jsonl      one {"text", "meta": {"pile_set_name"}, "id"} a line (line i = id i)
  truth.jsonl       one {"copy", "original", "rate", "jaccard"} per planted pair: ids, the edit rate,
                    the true Jaccard of their word 5-gram sets (what the threshold is about)

Scoring (pairs: a removed document and the kept twin it names, both of ours and datatrove's):
  recall(J >= 0.87)   planted pairs of true Jaccard >= 0.87 that end in one cluster
  recall by rate      the same per edit rate
  precision           reported pairs whose true Jaccard >= 0.87 / >= 0.7 (natural duplicates in the
                      real text count when they are near duplicates: the true Jaccard decides)
Timing is not printed: `time` the command on an idle machine for that.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from pipeline.core import dedup, minhash, ngrams  # noqa: E402

RATES = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
NGRAM = 5
THRESHOLD = 0.87


def base_documents(count: int, seed: int) -> list[tuple[str, str]]:
    """(text, subset) of `count` real documents of 50 words to 20,000 characters."""
    import real_text_corpus

    out = []
    budget = 4 << 20
    while len(out) < count:
        out = []
        for line in real_text_corpus.compose(budget, seed):
            doc = json.loads(line)
            text = doc["text"][:20_000]
            if len(ngrams.words(text)) >= 50:
                out.append((text, doc["meta"]["pile_set_name"]))
        budget *= 2
    return out[:count]


def edit(text: str, rate: float, rng: np.random.Generator) -> str:
    """The text with round(rate * words) word edits: substitute, delete or insert, one third each."""
    words = text.split()
    for _ in range(int(round(rate * len(words)))):
        at = int(rng.integers(0, len(words)))
        kind = int(rng.integers(0, 3))
        new = f"edit{int(rng.integers(0, 1 << 30))}"
        if kind == 0:
            words[at] = new
        elif kind == 1 and len(words) > 1:
            del words[at]
        else:
            words.insert(at, new)
    return " ".join(words)


def write(out_dir: str, docs: int, copies: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = base_documents(docs, seed)
    rows, truth = [(t, s) for t, s in base], []
    for i in range(copies):
        original = int(rng.integers(0, len(base)))
        rate = RATES[i % len(RATES)]
        text = edit(base[original][0], rate, rng)
        truth.append({"copy": len(rows), "original": original, "rate": rate,
                      "jaccard": round(minhash.jaccard(ngrams.shingles(text, NGRAM),
                                                       ngrams.shingles(base[original][0], NGRAM)), 4)})
        rows.append((text, base[original][1]))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "corpus.jsonl"), "w") as f:
        for i, (text, subset) in enumerate(rows):
            f.write(json.dumps({"text": text, "meta": {"pile_set_name": subset}, "id": i}) + "\n")
    with open(os.path.join(out_dir, "truth.jsonl"), "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in truth)
    print(f"{out_dir}: {len(rows)} documents ({len(base)} real, {copies} planted copies), rates {RATES}")


def load(out_dir: str):
    with open(os.path.join(out_dir, "corpus.jsonl")) as f:
        docs = [json.loads(line) for line in f]
    with open(os.path.join(out_dir, "truth.jsonl")) as f:
        truth = [json.loads(line) for line in f]
    return docs, truth


def run_ours(docs: list[dict], beam_args: list[str], **kwargs) -> list[tuple[int, int]]:
    """Dedup (near only) over the corpus on Beam: (removed id, twin id) pairs."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.beam.dedup.transform import Dedup

    pairs: list[tuple[int, int]] = []
    elements = [((0, d["id"]), {"text": d["text"], "subset": d["meta"]["pile_set_name"]}) for d in docs]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
            res = p | beam.Create(elements) | Dedup(exact=False, **kwargs)
            (res["removed"] | beam.Map(lambda r: f"{r['line']} {r['twin_line']}")
             | beam.io.WriteToText(os.path.join(tmp, "pairs")))
        for name in os.listdir(tmp):
            with open(os.path.join(tmp, name)) as f:
                pairs += [tuple(map(int, line.split())) for line in f]
    return sorted(pairs)


def score(docs: list[dict], truth: list[dict], pairs: list[tuple[int, int]]) -> dict:
    """Recall over planted pairs (by rate and J >= THRESHOLD), precision of reported pairs by their true Jaccard."""
    root = {a: b for a, b in pairs}
    cluster = dedup.components(pairs)

    def same(a: int, b: int) -> bool:
        return cluster.get(a, a) == cluster.get(b, b)

    cache: dict[int, np.ndarray] = {}

    def sh(i: int) -> np.ndarray:
        if i not in cache:
            cache[i] = ngrams.shingles(docs[i]["text"], NGRAM)
        return cache[i]

    out: dict = {"reported_pairs": len(pairs)}
    positives = [t for t in truth if t["jaccard"] >= THRESHOLD]
    out["recall_j087"] = round(sum(same(t["copy"], t["original"]) for t in positives) / max(1, len(positives)), 4)
    out["planted_j087"] = len(positives)
    out["recall_by_rate"] = {}
    for rate in RATES:
        group = [t for t in truth if t["rate"] == rate]
        out["recall_by_rate"][str(rate)] = {
            "pairs": len(group), "mean_jaccard": round(float(np.mean([t["jaccard"] for t in group])), 3),
            "found": round(sum(same(t["copy"], t["original"]) for t in group) / max(1, len(group)), 4)}
    sims = [minhash.jaccard(sh(a), sh(b)) for a, b in root.items()]
    out["precision_j087"] = round(sum(s >= THRESHOLD for s in sims) / max(1, len(sims)), 4)
    out["precision_j070"] = round(sum(s >= 0.7 for s in sims) / max(1, len(sims)), 4)
    return out


def agreement(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> dict:
    """How two dedups agree: the documents each removes, and the clusters' pairs (same-cluster relations)."""
    removed_a, removed_b = {x for x, _ in a}, {x for x, _ in b}
    both = removed_a & removed_b
    return {"removed_ours": len(removed_a), "removed_theirs": len(removed_b), "removed_both": len(both),
            "jaccard_of_removed_sets": round(len(both) / max(1, len(removed_a | removed_b)), 4)}


def datatrove_pairs(dt_dir: str) -> list[tuple[int, int]]:
    """(removed id, kept id) from datatrove's cluster output (written by scripts/bench/datatrove_minhash.py)."""
    with open(os.path.join(dt_dir, "pairs.txt")) as f:
        return sorted(tuple(map(int, line.split())) for line in f if line.strip())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--copies", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evaluate", action="store_true")
    ap.add_argument("--jaccard_threshold", type=float, default=None)
    ap.add_argument("--score_datatrove", default=None, help="datatrove's output dir (pairs.txt)")
    ap.add_argument("--runner_args", nargs=argparse.REMAINDER, default=[
        "--runner", "DirectRunner", "--direct_running_mode", "in_memory", "--direct_num_workers", "1"])
    args = ap.parse_args(argv)
    if not args.evaluate and not args.score_datatrove:
        write(args.out_dir, args.docs, args.copies, args.seed)
        return
    docs, truth = load(args.out_dir)
    result = {}
    if args.evaluate:
        ours = run_ours(docs, args.runner_args, jaccard_threshold=args.jaccard_threshold)
        with open(os.path.join(args.out_dir, "ours_pairs.txt"), "w") as f:
            f.writelines(f"{a} {b}\n" for a, b in ours)
        result["ours"] = score(docs, truth, ours)
    if args.score_datatrove:
        theirs = datatrove_pairs(args.score_datatrove)
        result["datatrove"] = score(docs, truth, theirs)
        ours_path = os.path.join(args.out_dir, "ours_pairs.txt")
        if os.path.exists(ours_path):
            with open(ours_path) as f:
                ours = [tuple(map(int, line.split())) for line in f]
            result["agreement"] = agreement(ours, theirs)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
