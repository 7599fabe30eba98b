"""Decontamination before or after the cleaning stages: what each order decides, and what it costs.

    python scripts/bench/bench_decontam_order.py [--mb 6] [--shape kinds] [--evals 300] [--words 30]

The job runs the stages first and matches eval n-grams against the text they leave
(docs/filters.md, "Order of stages"). This measures the other order on the same documents, in
process, with the job's own code (the four quality filters in order, `--decontam_ngram` 13, the
n-gram hashes and cuts of pipeline/core): real text (real_text_corpus.py; --shape kinds: six
kinds) and an eval set of `--evals` passages of `--words` words, each taken from a random document
(benchmark text that leaked into the corpus). Printed: the documents contaminated in their raw text,
how many of those the stages remove anyway, how many a C4 cut already cleans, how many stay
contaminated after the stages; with `--decontam_cut` first, how many documents the stages then
decide differently; and the CPU seconds of the matching in each order. The last line printed is
`RESULT {json}`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from pipeline.core import dedup, ngrams  # noqa: E402
from pipeline.stages.base import Doc, Keep, Remove  # noqa: E402
from pipeline.stages.c4_quality import C4Quality  # noqa: E402
from pipeline.stages.fineweb_quality import FineWebQuality  # noqa: E402
from pipeline.stages.gopher_quality import GopherQuality  # noqa: E402
from pipeline.stages.gopher_repetition import GopherRepetition  # noqa: E402

N = 13  # --decontam_ngram's default


def corpus(mb: float, shape: str) -> list[str]:
    spec = importlib.util.spec_from_file_location("real_text_corpus", os.path.join(HERE, "real_text_corpus.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [json.loads(line)["text"] for line in module.compose(int(mb * 1e6), seed=0, shape=shape)]


def eval_hashes(passages: list[str]) -> np.ndarray:
    """The eval set's sorted distinct n-gram hashes, as pipeline/io/eval_sets.py makes them."""
    parts = [np.empty(0, np.uint64)]
    for text in passages:
        tokens, _ = ngrams.word_spans(text)
        if len(tokens) >= N:
            parts.append(ngrams.ngram_hashes(ngrams.word_hashes(tokens), N).astype(np.uint64))
    return np.unique(np.concatenate(parts))


def found(text: str, evals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions of the text's n-grams in the eval set, the words' spans), as DecontaminateFn matches."""
    tokens, spans = ngrams.word_spans(text)
    if len(tokens) < N:
        return np.empty(0, np.int64), spans
    return dedup.matches(ngrams.ngram_hashes(ngrams.word_hashes(tokens), N).astype(np.uint64), evals), spans


def stages_verdict(stages, text: str, line: int) -> tuple[str | None, str]:
    """(the stage that removes the text or None, the text the stages leave)."""
    for stage in stages:
        verdict = stage.apply(Doc(text, "x", 0, line))
        if isinstance(verdict, Remove):
            return stage.name, text
        if isinstance(verdict, Keep) and verdict.text is not None:
            text = verdict.text
    return None, text


def main() -> None:
    """Both orders on the same documents; print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=6.0)
    parser.add_argument("--shape", default="kinds", help="real_text_corpus.py's shape")
    parser.add_argument("--evals", type=int, default=300)
    parser.add_argument("--words", type=int, default=30)
    args = parser.parse_args()
    texts = corpus(args.mb, args.shape)
    rng = random.Random(0)
    passages = []
    for i in rng.sample(range(len(texts)), args.evals):
        words = texts[i].split()
        start = rng.randrange(max(1, len(words) - args.words))
        passages.append(" ".join(words[start:start + args.words]))
    evals = eval_hashes(passages)
    stages = [GopherQuality(), GopherRepetition(), C4Quality(), FineWebQuality()]
    for stage in stages:
        stage.setup()

    before_s = after_s = 0.0
    raw_hits = removed_anyway = cleaned_by_c4 = after_hits = changed = kept = 0
    for line, text in enumerate(texts, 1):
        start = time.process_time()
        hits, spans = found(text, evals)  # decontamination first: every raw document is matched
        before_s += time.process_time() - start
        removed_by, final = stages_verdict(stages, text, line)
        if removed_by is None:
            kept += 1
            start = time.process_time()
            final_hits, _ = found(final, evals)  # the job's order: only what the stages keep, as they leave it
            after_s += time.process_time() - start
            after_hits += len(final_hits) > 0
        if len(hits):
            raw_hits += 1
            if removed_by is not None:
                removed_anyway += 1
            elif not len(final_hits):
                cleaned_by_c4 += 1
            # --decontam_cut first: the stages would see the cut text
            cut_removed_by, cut_final = stages_verdict(stages, dedup.cut_text(text, dedup.cut_spans(spans, hits, N)),
                                                      line)
            changed += (cut_removed_by != removed_by) or (removed_by is None and cut_final != final)
    result = {"docs": len(texts), "shape": args.shape, "kept_by_stages": kept, "eval_passages": len(passages),
              "contaminated_raw": raw_hits, "of_them_removed_by_stages": removed_anyway,
              "of_them_cleaned_by_c4_cut": cleaned_by_c4, "contaminated_after_stages": after_hits,
              "stage_decisions_changed_by_cut_first": changed,
              "match_cpu_s_before": round(before_s, 3), "match_cpu_s_after": round(after_s, 3)}
    print(f"{len(texts):,} documents ({args.mb} MB, {args.shape}), {len(passages)} eval passages of {args.words} "
          f"words; "
          f"the stages keep {kept:,}")
    print(f"contaminated in the raw text: {raw_hits}; of them removed by the stages anyway: {removed_anyway}; "
          f"cleaned by a C4 cut: {cleaned_by_c4}; contaminated after the stages: {after_hits}")
    print(f"--decontam_cut before the stages would change the stages' decision on {changed} documents")
    print(f"matching CPU s: before the stages {before_s:.2f} (every document), after {after_s:.2f} (the kept ones)")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
