"""Tokenizer backends in the whole pipeline vs the bare single-process SentencePiece loop, in one run.

    python scripts/bench/bench_tokenizer_backends.py [--scale 8] [--corpus DIR] [--model M.model]
        [--backends sentencepiece,gigatoken,kitoken] [--workers 1,2] [--out BENCH.md]

1. Corpus: --corpus (a directory in the Pile layout, train/*.jsonl.zst) or one composed by
   scripts/datagen/sample_corpus.py at --scale (scale 8: ~100 MB of text, ~19 M tokens).
2. Model: --model, by default the repository's tokenizers/sample/sample.model (Llama-2-style BPE:
   identity normalization, whitespace kept, byte fallback, split digits; vocab 8000).
3. The bare loop: one process, zstd stream-decompress, split lines, json.loads, sp.encode per document.
4. The pipeline (`python -m pipeline.run`, DirectRunner multi_processing) with each backend on each
   worker count, each in a fresh subprocess; wall time, CPU time of the process tree, tokens/s and
   the ratio to the bare loop; also the processing phase alone (first input file opened -> manifest
   written, from the log), and CPU per token beyond a one-document job's (interpreter and Beam
   start-up) and the self-check's, both of which do not grow with the input.
5. The per-step CPU cost of the tokenize-and-pack work on one file, in one process (no Beam).
6. Byte-identical output: every run's shard sha256s (from its manifest) must equal SentencePiece's.
Prints a Markdown report (and writes it to --out).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

from baseline import bare_loop  # scripts/bench/baseline.py (scripts/bench/ is on sys.path when run as a script)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_CORPUS = os.path.join(REPO, "scripts", "datagen", "sample_corpus.py")


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compose_corpus(out: str, scale: float) -> str:
    subprocess.run([sys.executable, SAMPLE_CORPUS, out, "--scale", str(scale)], cwd=REPO,
                   check=True, stdout=subprocess.DEVNULL)
    return out


def stage_costs(path: str, model: str, backends: list[str], seq_len: int = 2048, threads: int | None = None) -> dict:
    """CPU seconds of each step of the tokenize-and-pack work on one file, in one process, without Beam.

    `threads`: per tokenizer batch (None: the library's default, all cores; 1: as one of several workers).
    """
    import numpy as np

    from pipeline.core import documents, packing
    from pipeline.format import framing, records
    from pipeline.io import inputs
    from pipeline.tokenize.encoder import Encoder

    cost: dict = {}

    def timed(name, fn):
        start = time.process_time()
        out = fn()
        cost[name] = cost.get(name, 0.0) + time.process_time() - start
        return out

    chunks = timed("read: decompress, split lines", lambda: list(inputs.iter_chunks(path, 0, 4 << 20, 64 << 20)))
    texts = timed("parse: json + validation", lambda: [[documents.parse_line(x, 64 << 20)[0] for x in c.lines]
                                                       for c in chunks])
    flat = None
    for backend in backends:
        encoder = Encoder(model, backend, threads=threads)
        encoder.load()
        flat = timed(f"encode: {backend}", lambda e=encoder: [e.encode_flat(t) for t in texts])
    dtype = records.token_dtype_for(8000)

    def pack():
        out = []
        for ids, offsets in flat:
            piece = packing.build_stream_flat(ids, offsets, np.ones(len(offsets) - 1, bool), bos_id=None, eos_id=2,
                                              separator_id=2)
            out.append(packing.pack(piece, seq_len)[:2])
        return out

    packed = timed("pack: BOS/EOS, stream, records", pack)
    timed("serialize: tf.train.Example bytes", lambda: [framing.serialize_records(
        tokens, starts, dtype=dtype, document_boundaries=False) for tokens, starts in packed])
    cost["tokens"] = sum(int(offsets[-1]) + len(offsets) - 1 for _, offsets in flat)
    return cost


def run_pipeline(pattern: str, model: str, backend: str, workers: int, out: str) -> dict:
    """One pipeline run in a fresh process; wall time, CPU of the reaped process tree, the manifest."""
    cmd = [sys.executable, "-m", "pipeline.run", "--input", pattern, "--output_dir", out, "--tokenizer_model", model,
           "--tokenizer_backend", backend, "--overwrite", "--runner", "DirectRunner",
           "--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
    load = os.getloadavg()[0]
    cpu = _cpu_children()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    # The processing phase, from the log: the first file opened -> the manifest written (leaves out the
    # interpreter and Beam start-up and the driver's checks, which do not grow with the input).
    stamps = {}
    for line in proc.stderr.splitlines():
        for key, marker in (("first_read", "worker: reading "), ("manifest", "manifest.json: ")):
            if marker in line and (key == "manifest" or key not in stamps):
                stamps[key] = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    processing = (stamps["manifest"] - stamps["first_read"]).total_seconds() if len(stamps) == 2 else float("nan")
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    return {"wall": wall, "cpu": _cpu_children() - cpu, "load": load, "manifest": manifest, "processing": processing,
            "tokens": sum(s.get("tokens_with_epochs", 0) for s in manifest["subsets"].values()),
            # Each run writes into a directory of its own (run-<id>/): the shards compare by name and bytes.
            "shards": [(s["path"].split("/")[-1], s["sha256"]) for s in manifest["shards"]],
            "backend": manifest["tokenizer"]["backend"], "cmd": " ".join(cmd[1:])}


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", help="a directory in the Pile layout (train/*.jsonl.zst); default: compose one")
    p.add_argument("--scale", type=float, default=8.0, help="scripts/datagen/sample_corpus.py --scale when composing")
    p.add_argument("--model", default=os.path.join(REPO, "tokenizers", "sample", "sample.model"))
    p.add_argument("--backends", default="sentencepiece,gigatoken,kitoken")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--workdir", help="default: a temporary directory")
    p.add_argument("--out", help="also write the Markdown report here")
    args = p.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="bench_backends_")
    os.makedirs(work, exist_ok=True)
    backends = args.backends.split(",")
    workers = [int(w) for w in args.workers.split(",")]
    started = time.perf_counter()

    corpus = args.corpus or compose_corpus(os.path.join(work, "corpus"), args.scale)
    pattern = os.path.join(corpus, "train", "*.jsonl.zst")
    print(f"corpus {pattern} ({time.perf_counter() - started:.0f} s)", flush=True)
    model = args.model
    from pipeline.tokenize.kinds.sp_facts import ModelFacts

    with open(model, "rb") as f:
        facts = ModelFacts.from_proto(f.read())
    model_note = (f"{os.path.basename(model)}: {facts.model_type}, vocab {len(facts.piece_types)}, normalization "
                  f"{facts.normalizer}, byte_fallback {facts.byte_fallback}, remove_extra_whitespaces "
                  f"{facts.remove_extra_whitespaces}")

    bare = bare_loop(pattern, model)
    bare_rate = bare["tokens"] / bare["wall"]
    print(f"bare loop: {bare['tokens']:,} tokens in {bare['wall']:.1f} s", flush=True)

    # Fixed cost per worker count: the same job on a one-document input (Beam start-up, driver checks).
    tiny = os.path.join(work, "tiny", "train")
    os.makedirs(tiny, exist_ok=True)
    import zstandard

    with open(os.path.join(tiny, "00.jsonl.zst"), "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(
            json.dumps({"text": "one small document", "meta": {"pile_set_name": "Pile-CC"}}).encode() + b"\n"))
    fixed = {w: run_pipeline(os.path.join(tiny, "*.jsonl.zst"), model, "sentencepiece", w,
                             os.path.join(work, f"tiny_out_{w}")) for w in workers}
    print("fixed cost (one-document job): " + ", ".join(f"x{w} {r['wall']:.1f} s" for w, r in fixed.items()),
          flush=True)
    # The driver's self-check of each fast backend on this input, timed alone (part of each run's wall time).
    from pipeline.tokenize.self_check import choose_backend

    files = sorted(glob.glob(pattern))
    check, check_cpu = {}, {}
    for backend in backends:
        start, cpu = time.perf_counter(), time.process_time()
        choose_backend(backend, model, files)
        check[backend] = time.perf_counter() - start if backend != "sentencepiece" else 0.0
        check_cpu[backend] = time.process_time() - cpu if backend != "sentencepiece" else 0.0
    print(f"self-check: {check}", flush=True)

    runs = {}
    for backend in backends:
        for w in workers:
            r = run_pipeline(pattern, model, backend, w, os.path.join(work, f"out_{backend}_{w}"))
            runs[(backend, w)] = r
            print(f"{backend} x{w}: {r['wall']:.1f} s, {r['tokens'] / r['wall'] / 1e6:.2f} M tokens/s "
                  f"({r['tokens'] / r['wall'] / bare_rate:.2f}x bare), load {r['load']:.1f}", flush=True)

    stage = stage_costs(sorted(glob.glob(pattern))[0], model, backends)
    print(f"stage costs: {stage}", flush=True)

    reference = runs.get(("sentencepiece", workers[0]), next(iter(runs.values())))
    lines = [
        f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), Python "
        f"{platform.python_version()}; corpus {pattern}: {bare['docs']:,} documents, {bare['bytes'] / 1e6:.0f} MB "
        f"of JSON lines, {bare['tokens']:,} tokens (with EOS); model {model_note}.",
        "",
        "| run | wall s | tokens/s | x bare loop | processing s | processing x bare | CPU s (all processes) "
        "| tokens per CPU-s, x bare | load avg | shards = SentencePiece's |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| bare loop (1 process, sp.encode per document) | {bare['wall']:.1f} | {bare_rate / 1e6:.2f} M | 1.00 | "
        f"{bare['wall']:.1f} | 1.00 | {bare['cpu']:.1f} | 1.00 | | |",
    ]
    for (backend, w), r in runs.items():
        rate = r["tokens"] / r["wall"]
        steady = r["tokens"] / r["processing"] / bare_rate
        # CPU beyond what a one-document job of the same shape costs (interpreters, Beam) and the self-check.
        busy_cpu = r["cpu"] - fixed[w]["cpu"] - check_cpu[backend]
        per_cpu = f"{bare['cpu'] / busy_cpu:.2f}" if busy_cpu > 0.2 * r["cpu"] else "n/a"
        used = r["backend"]["name"]
        name = backend if used == backend else f"{backend} (ran {used})"
        same = "yes" if r["shards"] == reference["shards"] else "**NO**"
        lines.append(f"| pipeline, {name}, {w} worker{'s' if w > 1 else ''} | {r['wall']:.1f} | {rate / 1e6:.2f} M | "
                     f"{rate / bare_rate:.2f} | {r['processing']:.1f} | {steady:.2f} | {r['cpu']:.1f} | {per_cpu} | "
                     f"{r['load']:.1f} | {same} |")
    identical = all(r["shards"] == reference["shards"] for r in runs.values())
    lines += [
        "",
        "Fixed cost of a run (one-document input): "
        + ", ".join(f"{w} worker{'s' if w > 1 else ''} {r['wall']:.1f} s ({r['cpu']:.1f} CPU s)"
                    for w, r in fixed.items())
        + "; the fast backends' self-check in the driver: "
        + ", ".join(f"{b} {t:.1f} s" for b, t in check.items() if b != "sentencepiece")
        + ". Processing s: from the first input file opened to the manifest written (the log's timestamps), "
        "i.e. without start-up, which does not grow with the input (the Pile is ~1000x this corpus). "
        "CPU s (all processes): user + system time of the launcher and every worker process it reaped; "
        "tokens per CPU-s leaves out the one-document job's CPU and the self-check's.",
        f"Shards byte-identical across all runs: {'yes' if identical else 'NO'} "
        f"({len(reference['shards'])} shard(s), sha256 {reference['shards'][0][1][:16]}...).",
        "Backends recorded in the manifests: "
        + "; ".join(f"{b} x{w}: {r['backend']['name']} {r['backend']['version']} "
                    f"(self-check {r['backend']['parity'].get('result', 'n/a')}, "
                    f"{r['backend']['parity'].get('documents', 0)} documents)" for (b, w), r in runs.items()),
        f"Benchmark wall time: {time.perf_counter() - started:.0f} s. Command: "
        + " ".join(["python scripts/bench/bench_tokenizer_backends.py", *(argv if argv is not None else sys.argv[1:])]),
    ]
    lines += [
        "",
        f"Per-step CPU of the tokenize-and-pack work on {os.path.basename(sorted(glob.glob(pattern))[0])} "
        f"({stage['tokens']:,} tokens), one process, no Beam (`stage_costs`):",
        "",
        "| step | CPU s | M tokens per CPU-s |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {sec:.2f} | {stage['tokens'] / sec / 1e6:.1f} |" for name, sec in stage.items()
              if name != "tokens"]
    report = "\n".join(lines)
    print("\n" + report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(report + "\n")
    if not identical:
        raise SystemExit("shards differ between backends")
    return report


if __name__ == "__main__":
    main()
