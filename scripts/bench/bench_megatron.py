"""Our pipeline with --output_format megatron against Megatron-LM's tools/preprocess_data.py, in one run.

    python scripts/bench/bench_megatron.py --megatron_lm /path/to/Megatron-LM [--mb 200] [--workers 2] [--repeats 3]
        [--model M.model] [--workdir DIR]

1. Corpus: real text from this machine in the Pile's line format (one file = one document):
   Python sources (this interpreter's standard library and site-packages: "Github"), their
   documentation (.md/.rst/.txt: "Pile-CC"), /usr/share/doc (READMEs, changelogs, copyright
   files, gzipped ones decompressed: "FreeLaw") and man pages (troff source: "StackExchange"),
   taken in turn from each source in sorted path order until --mb of JSON lines; written as 8
   train/*.jsonl.zst files (our input) and, outside any timing, decompressed into one corpus.jsonl
   in the same order (preprocess_data.py reads plain JSON lines only).
2. Tokenizer: --model, or a Llama-2-style 32k BPE SentencePiece model trained here on a sample of
   the corpus (identity normalization, whitespace kept, byte fallback, split digits), kept in the
   work directory.
3. Timed, each in a fresh subprocess, in interleaved rounds (medians reported): Megatron's
   `preprocess_data.py --append-eod --workers N --tokenizer-type GPTSentencePieceTokenizer`
   (run from the checkout, in .venv-megatron built with --with-tools), and `python -m pipeline.run
   --output_format megatron --direct_num_workers N` with SentencePiece and with
   `--tokenizer_backend auto`; wall time (interpreter start to exit), CPU time and peak RSS of the
   process tree, and the 1-minute load average after each run (the machine may be shared).
4. Same documents: ours (SentencePiece) equal Megatron's, one for one, but for the whitespace-only
   texts that we leave out; the `auto` run's shards equal the SentencePiece run's, byte for byte.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import sys
import sysconfig
import tempfile

import numpy as np
import real_text_corpus  # scripts/bench/ is on sys.path when run as a script
import zstandard
from baseline import timed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from pipeline.format import megatron as fmt  # noqa: E402

MEGATRON_PYTHON = os.path.join(REPO, ".venv-megatron", "bin", "python")
TRAIN_FILES = 8
MAX_DOC_BYTES = 2 << 20


def _sources() -> list[tuple[str, tuple[str, ...], str]]:
    """(root, file name endings, subset) of every source of text, in a fixed order."""
    stdlib, site = sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]
    return [
        (stdlib, (".py",), "Github"),
        (site, (".py",), "Github"),
        (site, (".md", ".rst", ".txt"), "Pile-CC"),
        ("/usr/share/doc", ("",), "FreeLaw"),
        ("/usr/share/man", (".gz",), "StackExchange"),
    ]


def _files(root: str, endings: tuple[str, ...]) -> list[str]:
    out = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        out += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(endings)]
    return [p for p in out if os.path.isfile(p) and not os.path.islink(p)]


def _text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DOC_BYTES + 1)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        if not data or len(data) > MAX_DOC_BYTES or b"\x00" in data:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None


def build_corpus(root: str, megabytes: float) -> tuple[str, str, dict]:
    """Write train/*.jsonl.zst and corpus.jsonl under `root` (once); returns their paths and counts."""
    train, joined = os.path.join(root, "train"), os.path.join(root, "corpus.jsonl")
    stats_path = os.path.join(root, "corpus.json")
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            return train, joined, json.load(f)
    queues = [(iter(_files(r, e)), subset) for r, e, subset in _sources()]
    lines, size, per_subset = [], 0, {}
    while size < megabytes * 1e6 and queues:
        for q in list(queues):
            files, subset = q
            for path in files:
                text = _text(path)
                if text is not None:
                    line = json.dumps({"text": text, "meta": {"pile_set_name": subset}}, ensure_ascii=False).encode()
                    lines.append(line)
                    size += len(line) + 1
                    per_subset[subset] = per_subset.get(subset, 0) + 1
                    break
            else:
                queues.remove(q)
    os.makedirs(train, exist_ok=True)
    bounds = np.linspace(0, len(lines), TRAIN_FILES + 1).astype(int)
    with open(joined, "wb") as out:
        for i in range(TRAIN_FILES):
            data = b"".join(line + b"\n" for line in lines[bounds[i] : bounds[i + 1]])
            with open(os.path.join(train, f"{i:02d}.jsonl.zst"), "wb") as f:
                f.write(zstandard.ZstdCompressor(level=3).compress(data))
            out.write(data)
    stats = {"documents": len(lines), "bytes": size, "per_subset": per_subset}
    with open(stats_path, "w") as f:
        json.dump(stats, f)
    return train, joined, stats


def train_model(root: str, joined: str) -> str:
    """A Llama-2-style 32k BPE model trained on every 4th document's lines (once)."""
    prefix = os.path.join(root, "llama_style_32k")
    if not os.path.exists(prefix + ".model"):
        with open(joined, "rb") as f:
            real_text_corpus.train_model([line.rstrip(b"\n") for line in f], prefix)
    return prefix + ".model"


def read_prefix(prefix: str) -> list[np.ndarray]:
    """Every document of one .bin/.idx pair, with plain numpy."""
    with open(prefix + ".idx", "rb") as f:
        index = fmt.read_index(f.read())
    data = np.fromfile(prefix + ".bin", index.dtype)
    return [data[p // index.dtype.itemsize :][:n] for p, n in zip(index.pointers, index.lengths, strict=True)]


def same_documents(ours: str, theirs_prefix: str, joined: str) -> str:
    """Ours vs Megatron's, document for document (ours leaves out whitespace-only texts)."""
    manifest = fmt.load_manifest(ours)
    mine = [d for s in manifest["shards"] for d in read_prefix(os.path.join(ours, s["path"]))]
    theirs = read_prefix(theirs_prefix)
    with open(joined, "rb") as f:
        kept = [bool(json.loads(line)["text"].strip()) for line in f]
    want = [d for d, k in zip(theirs, kept, strict=True) if k]
    if len(want) != len(mine):
        return f"DIFFERENT: {len(mine)} documents vs {len(want)}"
    bad = [i for i, (a, b) in enumerate(zip(mine, want, strict=True)) if not np.array_equal(a, b)]
    return (f"identical: {len(mine)} documents, {sum(map(len, mine)):,} tokens ({len(theirs) - len(want)} "
            f"whitespace-only texts left out by us)" if not bad else f"DIFFERENT: documents {bad[:5]}")


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--megatron_lm", required=True, help="a Megatron-LM checkout (tag core_v0.16.1)")
    p.add_argument("--mb", type=float, default=200, help="MB of JSON lines in the corpus")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds; medians are reported")
    p.add_argument("--model", help="SentencePiece model (default: a 32k BPE trained on the corpus)")
    p.add_argument("--workdir", default=None)
    args = p.parse_args()
    root = args.workdir or tempfile.mkdtemp(prefix="bench_megatron_")
    train, joined, corpus = build_corpus(root, args.mb)
    model = args.model or train_model(root, joined)
    w = str(args.workers)
    ours = [sys.executable, "-m", "pipeline.run", "--input", f"{train}/*.jsonl.zst", "--tokenizer_model", model,
            "--output_format", "megatron", "--overwrite", "--direct_num_workers", w]
    configs = [
        (f"Megatron preprocess_data.py --workers {w} (sentencepiece)",
         ["env", f"PYTHONPATH={args.megatron_lm}", MEGATRON_PYTHON, "-W", "ignore",
          os.path.join(args.megatron_lm, "tools", "preprocess_data.py"), "--input", joined, "--output-prefix",
          os.path.join(root, "mlm"), "--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", model,
          "--append-eod", "--workers", w, "--log-interval", "100000"]),
        (f"pile-pipeline --output_format megatron, {w} workers, sentencepiece",
         [*ours, "--output_dir", os.path.join(root, "ours-sp")]),
        (f"pile-pipeline --output_format megatron, {w} workers, --tokenizer_backend auto",
         [*ours, "--output_dir", os.path.join(root, "ours-auto"), "--tokenizer_backend", "auto"]),
    ]
    samples: dict[str, list[tuple[float, int, float]]] = {name: [] for name, _ in configs}
    for round_ in range(args.repeats):
        for name, cmd in configs:
            cpu = _cpu_children()
            seconds, peak, _ = timed(cmd)
            cpu = _cpu_children() - cpu  # the whole process tree: every worker was waited for
            samples[name].append((seconds, peak, cpu))
            print(f"round {round_ + 1}: {name}: {seconds:.1f} s, {cpu:.1f} CPU-s, load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr)
    manifest = fmt.load_manifest(os.path.join(root, "ours-sp"))
    auto = fmt.load_manifest(os.path.join(root, "ours-auto"))
    tokens = manifest["totals"]["tokens"]
    print(f"corpus: {corpus['documents']:,} documents, {corpus['bytes'] / 1e6:.0f} MB of JSON lines "
          f"{corpus['per_subset']}, {tokens / 1e6:.1f} M tokens (vocab {manifest['tokenizer']['vocab_size']}); "
          f"{os.cpu_count()} cores; Megatron reads corpus.jsonl (decompressed before timing), we read the 8 "
          ".jsonl.zst files")
    same = same_documents(os.path.join(root, "ours-sp"), os.path.join(root, "mlm_text_document"), joined)
    print(f"ours vs Megatron's documents: {same}")
    print(f"auto backend: {auto['tokenizer']['backend']['name']}, shards identical to sentencepiece's: "
          f"{auto['shards'] == manifest['shards']}")
    print(f"\n| run (median of {args.repeats} interleaved rounds) | wall s | all rounds | M tokens/s | MB/s "
          "| vs Megatron (wall) | CPU-s | vs Megatron (CPU) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = base_cpu = None
    for name, _ in configs:
        times = sorted(t for t, _, _ in samples[name])
        cpus = sorted(c for _, _, c in samples[name])
        median, cpu = times[len(times) // 2], cpus[len(cpus) // 2]
        base, base_cpu = base or median, base_cpu or cpu
        print(f"| {name} | {median:.1f} | {', '.join(f'{t:.1f}' for t in times)} | {tokens / median / 1e6:.2f} | "
              f"{corpus['bytes'] / median / 1e6:.1f} | {base / median:.2f}x | {cpu:.1f} | {base_cpu / cpu:.2f}x | "
              f"{max(p for _, p, _ in samples[name]) / 1e6:,.0f} |")


if __name__ == "__main__":
    main()
