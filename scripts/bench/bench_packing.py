"""Concat against best-fit packing on a corpus' real document lengths: cuts, padding, sequences, speed.

    python scripts/bench/bench_packing.py CORPUS_DIR MODEL [--seq_lens 2048,4096] [--chunk_mb 4]
        [--windows 16,64,256,1024,4096] [--repeats 5] [--chars_per_token 0]

1. Lengths: every document of CORPUS_DIR/train/*.jsonl.zst tokenized with MODEL (SentencePiece),
   EOS added; with --chars_per_token > 0, also an estimate from characters (a Llama-2-style model
   gives ~3.6 characters a token on English text, a small model many fewer: its documents are longer).
   Documents are cut into work items of --chunk_mb of input, in input order, as the job's chunks.
2. Per seq_len: for concat, the documents split across records and the sequences; for best_fit,
   per window (items per window, each work item packed on its own), the documents cut, the
   padding fraction and the sequences.
3. Speed, pure functions on real arrays of two work items (the most tokens, the most documents),
   side by side in one process (interleaved rounds, the best of --repeats): concat =
   `packing.build_stream_flat` + `pack` + `framing.serialize_records` (with segment ids and
   positions, as best_fit always writes them, and without: "tokens only"); best_fit =
   `build_stream_flat` + `best_fit.pack_documents` + `framing.serialize_packed`; and SentencePiece
   encoding the same documents, the job's main cost.
Prints Markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from pipeline.core import best_fit, packing  # noqa: E402
from pipeline.format import framing, records  # noqa: E402

EOS = 2


def read_corpus(corpus: str) -> tuple[list[str], np.ndarray]:
    """Texts and their input bytes (line + newline), in input order."""
    import zstandard

    texts, sizes = [], []
    for path in sorted(glob.glob(os.path.join(corpus, "train", "*.jsonl.zst"))):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        for line in data.split(b"\n"):
            if line.strip():
                texts.append(json.loads(line)["text"])
                sizes.append(len(line) + 1)
    return texts, np.array(sizes, np.int64)


def work_items(input_bytes: np.ndarray, chunk_bytes: int) -> list[np.ndarray]:
    """Document indices of each chunk: consecutive documents, a new chunk every chunk_bytes of input."""
    owner = (np.cumsum(input_bytes) - input_bytes) // chunk_bytes
    return [np.flatnonzero(owner == c) for c in np.unique(owner)]


def concat_stats(lengths: np.ndarray, seq_len: int) -> tuple[float, float, int]:
    """(documents split across records, of them fitting in one, sequences) of one concatenated stream."""
    ends = np.cumsum(lengths)
    begins = ends - lengths
    cut = begins // seq_len != (ends - 1) // seq_len
    return float(cut.mean()), float((cut & (lengths <= seq_len)).mean()), -(-int(ends[-1]) // seq_len)


def best_fit_stats(chunks: list[np.ndarray], seq_len: int, window: int) -> tuple[float, float, int]:
    """(documents cut, padding fraction, sequences) with each work item packed on its own."""
    sequences = padding = docs = cut = 0
    for lengths in chunks:
        full, rest = lengths // seq_len, lengths % seq_len
        items = rest[rest > 0]
        opened = sum(best_fit.assign_sequences(items[a:a + window], seq_len)[1] for a in range(0, len(items), window))
        sequences += opened + int(full.sum())
        padding += opened * seq_len - int(items.sum())
        docs += len(lengths)
        cut += int((lengths > seq_len).sum())
    return cut / docs, padding / (sequences * seq_len), sequences


def speed(ids: np.ndarray, offsets: np.ndarray, texts: list[str], sp, seq_len: int, window: int,
          repeats: int) -> dict:
    """Best seconds of each pure function on one work item (interleaved rounds)."""
    chosen = np.ones(len(offsets) - 1, bool)
    sizes = np.diff(offsets) + 1
    dtype = records.token_dtype_for(32000)

    def concat():
        stream = packing.build_stream_flat(ids, offsets, chosen, bos_id=None, eos_id=EOS, separator_id=EOS)
        tokens, starts, _ = packing.pack(stream, seq_len)
        framing.serialize_records(tokens, starts, dtype=dtype, document_boundaries=True)

    def concat_tokens_only():
        stream = packing.build_stream_flat(ids, offsets, chosen, bos_id=None, eos_id=EOS, separator_id=EOS)
        tokens, starts, _ = packing.pack(stream, seq_len)
        framing.serialize_records(tokens, starts, dtype=dtype, document_boundaries=False)

    def fit():
        stream = packing.build_stream_flat(ids, offsets, chosen, bos_id=None, eos_id=EOS, separator_id=EOS)
        out, _ = best_fit.pack_documents(stream, sizes, seq_len, window, 0, final=True, dtype=dtype)
        framing.serialize_packed(out.tokens, out.segment_ids, out.positions, dtype=dtype)

    def encode():
        sp.encode(texts)

    best = {"concat": np.inf, "tokens_only": np.inf, "best_fit": np.inf, "encode": np.inf}
    for _ in range(repeats):
        for name, fn in (("concat", concat), ("tokens_only", concat_tokens_only), ("best_fit", fit),
                         ("encode", encode)):
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main(argv=None) -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("model")
    parser.add_argument("--seq_lens", default="2048,4096")
    parser.add_argument("--chunk_mb", type=float, default=4.0)
    parser.add_argument("--windows", default="16,64,256,1024,4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chars_per_token", type=float, default=0.0)
    args = parser.parse_args(argv)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=args.model)
    texts, input_bytes = read_corpus(args.corpus)
    encoded = sp.encode(texts)
    measured = np.array([len(e) + 1 for e in encoded], np.int64)
    chunks = work_items(input_bytes, int(args.chunk_mb * (1 << 20)))
    sets = {os.path.basename(args.model): measured}
    if args.chars_per_token > 0:
        sets[f"chars / {args.chars_per_token}"] = np.maximum(
            1, np.round(np.array([len(t) for t in texts]) / args.chars_per_token).astype(np.int64) + 1)
    windows = [int(w) for w in args.windows.split(",")]
    print(f"{len(texts):,} documents, {len(chunks)} work items of {args.chunk_mb} MB\n")
    print("| lengths | seq_len | packing | window | documents cut | of them fitting | padding | sequences |")
    print("|---|---|---|---|---|---|---|---|")
    for name, lengths in sets.items():
        for seq_len in (int(s) for s in args.seq_lens.split(",")):
            cut, fitting, count = concat_stats(lengths, seq_len)
            print(f"| {name} (median {int(np.median(lengths))}) | {seq_len} | concat | - | {cut:.1%} | {fitting:.1%} "
                  f"| ~0 | {count:,} |")
            for window in windows:
                cut, pad, count = best_fit_stats([lengths[c] for c in chunks], seq_len, window)
                print(f"| | {seq_len} | best_fit | {window} | {cut:.1%} | 0 | {pad:.2%} | {count:,} |")
    print(f"\nSpeed on one work item (best of {args.repeats}, interleaved), the one with the most tokens and "
          "the one with the most documents:\n")
    print("| work item | seq_len | concat s | concat, tokens only s | best_fit s | SentencePiece encode s "
          "| (best_fit - concat) / encode | (best_fit - tokens only) / encode |")
    print("|---|---|---|---|---|---|---|---|")
    most_tokens = max(chunks, key=lambda c: int(measured[c].sum()))
    most_docs = max(chunks, key=len)
    for item in (most_tokens, most_docs):
        ids = np.concatenate([np.asarray(encoded[i], np.int32) for i in item])
        offsets = np.concatenate([[0], np.cumsum([len(encoded[i]) for i in item])]).astype(np.int64)
        for seq_len in (int(s) for s in args.seq_lens.split(",")):
            best = speed(ids, offsets, [texts[i] for i in item], sp, seq_len, best_fit.DEFAULT_WINDOW, args.repeats)
            extra = best["best_fit"] - best["concat"]
            over_tokens = best["best_fit"] - best["tokens_only"]
            print(f"| {len(item)} documents, {len(ids):,} tokens | {seq_len} | {best['concat']:.4f} | "
                  f"{best['tokens_only']:.4f} | {best['best_fit']:.4f} | {best['encode']:.3f} | "
                  f"{extra / best['encode']:+.1%} | {over_tokens / best['encode']:+.1%} |")

if __name__ == "__main__":
    main()
