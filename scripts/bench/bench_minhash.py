"""CPU seconds per MB of text for MinHash signatures: ours (numpy) against mmh3 and datasketch, same texts.

    PYTHONPATH=. .venv/bin/python scripts/bench/bench_minhash.py PLANTED_DIR/corpus.jsonl [--docs 500]
    PYTHONPATH=. .venv-datatrove/bin/python scripts/bench/bench_minhash.py PLANTED_DIR/corpus.jsonl  # + datasketch

Each variant: word 5-gram shingles of each document, 128 permutations. CPU time (process_time),
not wall time, so a loaded machine distorts it less; each variant's signatures are also checked
to estimate the same Jaccard as ours within sampling error (a wrong implementation is not timed).
Variants whose library is missing are reported as such.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from pipeline.core import minhash, ngrams

NUM_PERM, NGRAM = 128, 5


def ours(texts):
    hasher = minhash.MinHasher(NUM_PERM, 1)
    keys = hasher.keys
    # As the job's SignFn: words hashed in numpy, every n-gram (a repeat cannot change a minimum).
    return [hasher.signature(ngrams.ngram_hashes(ngrams.text_word_hashes(t), NGRAM), keys) for t in texts]


def ours_blake2b_words(texts):
    hasher = minhash.MinHasher(NUM_PERM, 1)
    keys = hasher.keys
    return [hasher.signature(np.unique(ngrams.ngram_hashes(ngrams.word_hashes(ngrams.words(t)), NGRAM)), keys)
            for t in texts]


def _grams(text):
    words = ngrams.words(text)
    return {" ".join(words[i : i + NGRAM]) for i in range(max(1, len(words) - NGRAM + 1))}


def with_mmh3(texts):
    import mmh3

    rng = np.random.default_rng(1)
    prime = np.uint64((1 << 61) - 1)
    a = rng.integers(1, 1 << 61, NUM_PERM, dtype=np.uint64)
    b = rng.integers(0, 1 << 61, NUM_PERM, dtype=np.uint64)
    out = []
    for t in texts:
        hv = np.array([mmh3.hash(g, signed=False) for g in _grams(t)], np.uint64)
        with np.errstate(over="ignore"):
            out.append(((hv[:, None] * a + b) % prime).min(axis=0))
    return out


def with_datasketch(texts):
    from datasketch import MinHash

    out = []
    for t in texts:
        m = MinHash(num_perm=NUM_PERM, seed=1)
        m.update_batch([g.encode() for g in _grams(t)])
        out.append(m.hashvalues)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--docs", type=int, default=500)
    args = ap.parse_args()
    with open(args.corpus) as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(args.docs), f, strict=False)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    reference = None
    for name, fn in [("ours (words hashed in numpy)", ours), ("ours, blake2b per distinct word", ours_blake2b_words),
                     ("mmh3 per shingle", with_mmh3),
                     ("datasketch", with_datasketch)]:
        try:
            fn(texts[:5])  # one-off per process (ours: the table of word characters, ~0.2 CPU-s), not timed
            start = time.process_time()
            sigs = fn(texts)
            cpu = time.process_time() - start
        except ImportError as missing:
            print(f"{name}: not installed ({missing.name})")
            continue
        est = [float(np.mean(sigs[i] == sigs[i + 1])) for i in range(len(sigs) - 1)]
        if reference is None:
            reference = est
        drift = float(np.max(np.abs(np.array(est) - np.array(reference))))
        print(f"{name}: {cpu / mb:.3f} CPU-s per MB ({mb:.1f} MB, {len(texts)} docs); "
              f"max |estimate - ours| over neighbours {drift:.2f}")


if __name__ == "__main__":
    main()
