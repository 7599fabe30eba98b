"""CPU seconds per MB of text for MinHash signatures: ours (numba, numpy) against mmh3 and datasketch, same texts.

    PYTHONPATH=. .venv/bin/python scripts/bench/bench_minhash.py PLANTED_DIR/corpus.jsonl [--docs 500]
    PYTHONPATH=. .venv-datatrove/bin/python scripts/bench/bench_minhash.py PLANTED_DIR/corpus.jsonl  # + datasketch

Each variant: word 5-gram shingles of each document, 128 permutations. CPU time (process_time),
not wall time, so a loaded machine distorts it less; each variant's signatures are also checked
to estimate the same Jaccard as ours within sampling error (a wrong implementation is not timed).
Variants whose library is missing are reported as such. `--exact` adds exact dedup's key (the
job's Sign step computes both from one NFC pass): the compiled Signer, and the numpy path's
`ngrams.exact_key`.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from pipeline.core import minhash, minhash_kernel, ngrams

NUM_PERM, NGRAM = 128, 5


def ours_compiled(texts, normalization=None):
    """The job's SignFn where numba is installed: pipeline/core/minhash_kernel.py's kernels."""
    if not minhash_kernel.available():
        raise ImportError(name="numba")
    signer = minhash_kernel.Signer(normalization, NGRAM, NUM_PERM, 1, compiled=True)
    empty = np.full(NUM_PERM, minhash.EMPTY, np.uint32)  # the numpy signature of no shingles
    return [sig if (sig := signer.sign(t)[2]) is not None else empty for t in texts]


def ours_compiled_exact(texts):
    return ours_compiled(texts, "nfc_whitespace")


def ours_exact(texts):
    hasher = minhash.MinHasher(NUM_PERM, 1)
    keys = hasher.keys
    out = []
    for t in texts:
        ngrams.exact_key(t)
        out.append(hasher.signature(ngrams.ngram_hashes(ngrams.text_word_hashes(t), NGRAM), keys))
    return out


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
    ap.add_argument("--exact", action="store_true", help="also the variants with exact dedup's key")
    args = ap.parse_args()
    with open(args.corpus) as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(args.docs), f, strict=False)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    reference = first = None
    variants = [("ours, compiled (numba)", ours_compiled), ("ours, numpy (words hashed in numpy)", ours),
                ("ours, blake2b per distinct word", ours_blake2b_words), ("mmh3 per shingle", with_mmh3),
                ("datasketch", with_datasketch)]
    if args.exact:
        variants[2:2] = [("ours, compiled, + exact key", ours_compiled_exact), ("ours, numpy, + exact key", ours_exact)]
    for name, fn in variants:
        try:
            fn(texts[:5])  # one-off per process (ours: the table of word characters), not timed
            start = time.process_time()
            sigs = fn(texts)
            cpu = time.process_time() - start
        except ImportError as missing:
            print(f"{name}: not installed ({missing.name})")
            continue
        est = [float(np.mean(sigs[i] == sigs[i + 1])) for i in range(len(sigs) - 1)]
        if reference is None:
            reference, first = est, sigs
        drift = float(np.max(np.abs(np.array(est) - np.array(reference))))
        same = name.startswith("ours, ") and all(np.array_equal(a, b) for a, b in zip(sigs, first, strict=True))
        print(f"{name}: {cpu / mb:.3f} CPU-s per MB ({mb:.1f} MB, {len(texts)} docs); "
              f"max |estimate - ours| over neighbours {drift:.2f}{'; signatures identical' if same else ''}")


if __name__ == "__main__":
    main()
