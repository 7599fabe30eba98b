"""The whole pipeline against the bare tokenizer loop and Megatron-LM's preprocess_data.py, on real text.

    python scripts/bench/bench_pipeline.py [--mb 180] [--shapes base,pile22,many_small] [--files [SHAPE:]N,N]
        [--scale 4] [--repeats 2] [--workers 2] [--megatron_lm DIR] [--workdir DIR] [--no_stages]

1. Corpora: scripts/bench/real_text_corpus.py composes --mb of real text from this machine in the Pile's
   line format for each shape (--shapes; see that script: `base`, log-normal document sizes up to
   several MB, non-ASCII text, \\u escapes, files of equal size; `pile22`, the 22 subsets, ~2 KB
   median documents, astral-plane characters as surrogate-pair escapes, two files of 48% and 52%;
   `many_small`, 64 files of log-normal sizes) and trains a Llama-2-style 32k BPE model on each;
   the same documents, in the same order, are written as --files files (default per shape: base
   1,2,8, pile22 2, many_small 64), and decompressed into one corpus.jsonl for Megatron (outside any
   timing: its tool reads plain JSON lines only); with --scale K, the fewest files' documents K times
   over, each copy after the first in another order (no two files the same).
2. Timed (after compiling the package's .pyc, as an install does), each as a whole command in a
   fresh subprocess, in --repeats interleaved rounds (medians reported; every configuration sees
   the same drift of a shared machine): the bare loop (one
   process: zstd stream-decompress, split lines, `json.loads`, `sp.encode` per document,
   scripts/bench/baseline.py), Megatron's `preprocess_data.py --append-eod --workers N` when --megatron_lm
   and .venv-megatron (scripts/setup_megatron_env.sh --with-tools) are there (else skipped, with the reason), and
   `python -m pipeline.run --direct_num_workers N --seq_len 512` with defaults, SentencePiece and
   `--tokenizer_backend auto`, for each file count, and `auto` at K x the input.
3. For each run: wall time, CPU time of the process tree, the ratio to the bare loop (at K x the
   input, to K x the bare loop's time), peak RSS and peak anonymous memory (RssAnon sampled every
   0.1 s: RSS also counts mapped files' page-cache pages, which the kernel can drop), and its fixed
   costs: start-up (command start to the first input read by a worker: interpreter, Beam, checks,
   worker processes) and finish (last input read to exit: shard writing, manifest, shutdown).
4. Checks: the `auto` shards equal the SentencePiece shards byte for byte, for every file count.
5. Per stage (unless --no_stages): CPU seconds of each step of the per-token work on one file of the
   first shape's 2-file corpus, in one process without Beam, one tokenizer thread (as each of the
   workers runs it), seq_len 512 (scripts/bench/bench_tokenizer_backends.py `stage_costs`).
Prints Markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from baseline import bare_loop  # scripts/bench/ is on sys.path when run as a script
from bench_tokenizer_backends import stage_costs
from real_text_corpus import SHAPES, compose, describe, file_shares, train_model, write_files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEGATRON_PYTHON = os.path.join(REPO, ".venv-megatron", "bin", "python")


READING = re.compile(r"(worker|pipeline\.beam\.read): reading ")
READ = re.compile(r"(worker|pipeline\.beam\.read): read ")


def _log_time(line: str) -> float | None:
    """The epoch time of a log line that starts with Python logging's asctime."""
    try:
        return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def _anon_kib(pid: int) -> int:
    """RssAnon of a process and its children (KiB): memory the kernel cannot drop, unlike mapped files' pages."""
    total = 0
    try:
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        children = []
    for p in [pid, *map(int, children)]:
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("RssAnon:")), 0)
        except OSError:
            pass
    return total


def run(cmd: list[str], log_path: str) -> dict:
    """Run a command to its end; wall and CPU seconds, the fixed costs read from its log, its stdout."""
    start = time.time()
    with open(log_path, "w") as log, open(log_path + ".out", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=log, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        anon = [0]
        sampler = threading.Thread(target=_sample_anon, args=(proc.pid, anon), daemon=True)
        sampler.start()
        # wait4: this command's own CPU time and peak RSS (the largest process of its tree), in KiB.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        sampler.join()
    end = time.time()
    if code:
        raise SystemExit(f"{cmd} failed with {code}; see {log_path}")
    # Workers log "reading FILE" / "read FILE: ..." (through the runner's log when they are processes).
    reads = [t for line in open(log_path) if READING.search(line) and (t := _log_time(line))]
    done = [t for line in open(log_path) if READ.search(line) and (t := _log_time(line))]
    return {"wall": end - start, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
            "anon_mb": anon[0] / 1024,
            "stdout": open(log_path + ".out").read(),
            "startup": min(reads) - start if reads else None, "finish": end - max(done) if done else None}


def _sample_anon(pid: int, peak: list[int]) -> None:
    """The command's peak RssAnon (with its children), sampled every 0.1 s until it exits, into peak[0]."""
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        peak[0] = max(peak[0], _anon_kib(pid))
        time.sleep(0.1)


DEFAULT_FILES = {"base": "1,2,8", "pile22": "2", "many_small": "64"}


def corpus(root: str, mb: float, file_counts: list[int], shape: str = "base",
           scales: tuple[int, ...] = ()) -> tuple[dict[int, str], dict[int, str], str, str, str]:
    """Write a shape's corpus once per file count (and repeated `scales` times over its fewest files), the
    decompressed copy and the model; returns the directories by file count and by scale, the JSON lines'
    path, the model's and the corpus' description."""
    root = os.path.join(root, shape)
    lines_path = os.path.join(root, "corpus.jsonl")
    model = os.path.join(root, "real32k.model")
    dirs = {n: os.path.join(root, f"files-{n}") for n in file_counts}
    scaled = {k: os.path.join(root, f"x{k}") for k in scales}
    summary_path = os.path.join(root, "corpus.txt")
    if not (os.path.exists(model) and all(os.path.isdir(d) for d in dirs.values())):
        lines = compose(int(mb * 1e6), shape=shape)
        for n, d in dirs.items():
            write_files(lines, os.path.join(d, "train"), n, file_shares(shape, n), content_size=shape != "pile22")
        with open(lines_path, "wb") as f:
            f.writelines(line + b"\n" for line in lines)
        train_model(lines, model[: -len(".model")])
        with open(summary_path, "w") as f:
            f.write(describe(lines))
    # The same documents k times over in the fewest files, each time after the first in another
    # order: identical files would be taken together in one tokenizer call (groups of small files),
    # whose per-call word cache then finds every word of the copies.
    for k, d in scaled.items():
        if not os.path.isdir(d):
            n = min(file_counts)
            source = os.path.join(dirs[n], "train")
            os.makedirs(os.path.join(d, "train"))
            with open(lines_path, "rb") as f:
                lines = f.read().splitlines()
            for i in range(k):
                if i == 0:
                    written = [os.path.join(source, name) for name in sorted(os.listdir(source))]
                else:
                    order = np.random.default_rng(i).permutation(len(lines))
                    written = write_files([lines[j] for j in order], os.path.join(d, f"copy-{i}"), n,
                                          file_shares(shape, n), content_size=shape != "pile22")
                for path in written:
                    shutil.copyfile(path, os.path.join(d, "train", f"{i}-{os.path.basename(path)}"))
                shutil.rmtree(os.path.join(d, f"copy-{i}"), ignore_errors=True)
    with open(summary_path) as f:
        return dirs, scaled, lines_path, model, f.read()


def files_of(option: str | None, shape: str) -> str:
    """The file counts of a shape from --files: "1,2" for every shape, or "base:1,2;pile22:2" per shape."""
    if not option:
        return DEFAULT_FILES[shape]
    if ":" not in option:
        return option
    given = dict(part.split(":", 1) for part in option.split(";"))
    return given.get(shape, DEFAULT_FILES[shape])


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if len(values) % 2 else sum(values[len(values) // 2 - 1:][:2]) / 2


def ours(name: str, pattern: str, out: str, model: str, backend: str, workers: str) -> tuple[str, list[str]]:
    return name, [sys.executable, "-m", "pipeline.run", "--input", pattern, "--output_dir", out,
                  "--tokenizer_model", model, "--tokenizer_backend", backend, "--seq_len", "512", "--overwrite",
                  "--direct_num_workers", workers]


def main() -> None:
    """Run the benchmark and print the tables."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=180, help="MB (1e6 bytes) of JSON lines per shape")
    p.add_argument("--shapes", default="base", help=f"corpus shapes, of {', '.join(SHAPES)}")
    p.add_argument("--files", default=None,
                   help="file counts to write the same documents into, for every shape or per shape "
                        f"(base:1,2;pile22:2); default {DEFAULT_FILES}")
    p.add_argument("--scale", default="", help="also time `auto` at these multiples of the input, e.g. 4")
    p.add_argument("--repeats", type=int, default=2, help="interleaved rounds; medians are reported")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--megatron_lm", help="a Megatron-LM checkout (tag core_v0.16.1) to time preprocess_data.py")
    p.add_argument("--workdir", default=None)
    p.add_argument("--no_stages", action="store_true", help="skip the per-stage CPU table")
    p.add_argument("--scale_only", action="store_true", help="time only the bare loop and the --scale runs")
    p.add_argument("--bare", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.bare:
        print(json.dumps(bare_loop(args.bare, args.model)))
        return
    root = args.workdir or tempfile.mkdtemp(prefix="bench_pipeline_")
    shapes = args.shapes.split(",")
    if bad := [s for s in shapes if s not in SHAPES]:
        raise SystemExit(f"--shapes: unknown shape {bad[0]!r} (known: {', '.join(SHAPES)})")
    scales = tuple(int(k) for k in args.scale.split(",") if k)
    w = str(args.workers)
    megatron = None
    if not args.megatron_lm:
        megatron = "skipped: no --megatron_lm checkout given"
    elif not os.path.exists(MEGATRON_PYTHON):
        megatron = f"skipped: {MEGATRON_PYTHON} missing (run scripts/setup_megatron_env.sh --with-tools)"
    configs: list[tuple[str, str, list[str]]] = []  # (shape, name, command)
    corpora = {}
    for shape in shapes:
        file_counts = [int(n) for n in files_of(args.files, shape).split(",")]
        dirs, scaled, lines_path, model, summary = corpus(root, args.mb, file_counts, shape, scales)
        corpora[shape] = (file_counts, dirs, scaled, model, summary)
        work = os.path.join(root, shape)
        bare_input = f"{dirs[file_counts[0]]}/train/*.jsonl.zst"
        configs.append((shape, "bare loop (1 process)",
                        [sys.executable, __file__, "--bare", bare_input, "--model", model]))
        if not megatron and not args.scale_only:
            configs.append((shape, f"Megatron preprocess_data.py --workers {w} (on corpus.jsonl)",
                            ["env", f"PYTHONPATH={args.megatron_lm}", MEGATRON_PYTHON, "-W", "ignore",
                             os.path.join(args.megatron_lm, "tools", "preprocess_data.py"), "--input", lines_path,
                             "--output-prefix", os.path.join(work, "mlm"), "--tokenizer-type",
                             "GPTSentencePieceTokenizer", "--tokenizer-model", model, "--append-eod", "--workers",
                             w, "--log-interval", "100000"]))
        for n in ([] if args.scale_only else file_counts):
            for backend in ("sentencepiece", "auto"):
                configs.append((shape, *ours(f"ours, {backend}, {n} file{'s' if n > 1 else ''}",
                                             f"{dirs[n]}/train/*.jsonl.zst", os.path.join(work, f"out-{n}-{backend}"),
                                             model, backend, w)))
        for k in scales:
            configs.append((shape, *ours(f"ours, auto, {k}x the input", f"{scaled[k]}/train/*.jsonl.zst",
                                         os.path.join(work, f"out-x{k}-auto"), model, "auto", w)))
    if not args.repeats:  # corpora only
        for shape in shapes:
            print(f"{shape}: {corpora[shape][-1]}")
        return
    # As installed: pip compiles a package's .pyc, and a checkout writes them on first use unless
    # PYTHONDONTWRITEBYTECODE is set (as on some CI machines and sandboxes): compile ours first, so
    # that no timed run compiles ~100 modules from source.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(REPO, "pipeline")], check=True)
    samples: dict[tuple[str, str], list[dict]] = {(shape, name): [] for shape, name, _ in configs}
    for round_ in range(args.repeats):
        for shape, name, cmd in configs:
            result = run(cmd, os.path.join(root, "last.log"))
            samples[shape, name].append(result)
            print(f"round {round_ + 1}: {shape}: {name}: {result['wall']:.1f} s, {result['cpu']:.1f} CPU-s, "
                  f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    print(f"{os.cpu_count()} cores, {args.workers} workers, seq_len 512, median of {args.repeats} interleaved "
          "rounds; a 32k Llama-2-style BPE model trained on each corpus")
    if megatron:
        print(f"Megatron preprocess_data.py: {megatron}")
    for shape in shapes:
        file_counts, dirs, scaled, model, summary = corpora[shape]
        work = os.path.join(root, shape)
        bare = json.loads(samples[shape, "bare loop (1 process)"][0]["stdout"])
        print(f"\n**{shape}**: {summary}; {bare['tokens'] / 1e6:.1f} M tokens")
        for n in ([] if args.scale_only else file_counts):
            sp, auto = (json.load(open(os.path.join(work, f"out-{n}-{b}", "manifest.json")))
                        for b in ("sentencepiece", "auto"))
            print(f"{n} file(s): auto backend {auto['tokenizer']['backend']['name']}; shards identical to "
                  f"SentencePiece's: {[s['sha256'] for s in auto['shards']] == [s['sha256'] for s in sp['shards']]}")
        base = median([s["wall"] for s in samples[shape, "bare loop (1 process)"]])
        print("\n| run | wall s | all rounds | x bare loop | CPU-s | CPU-s per M tokens | peak RSS MB "
              "| peak anonymous MB | start-up s | finish s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for s_, name, _ in configs:
            if s_ != shape:
                continue
            runs = samples[shape, name]
            wall = median([r["wall"] for r in runs])
            scale = next((k for k in scales if name.endswith(f"{k}x the input")), 1)
            fixed = [median([r[k] for r in runs]) if runs[0][k] is not None else None for k in ("startup", "finish")]
            rounds = ", ".join(f"{r['wall']:.1f}" for r in runs)
            cpu = median([r["cpu"] for r in runs])
            print(f"| {name} | {wall:.1f} | {rounds} | {scale * base / wall:.2f} | {cpu:.1f} | "
                  f"{cpu / (scale * bare['tokens'] / 1e6):.3f} | {max(r['rss_mb'] for r in runs):.0f} | "
                  f"{max(r['anon_mb'] for r in runs):.0f} | "
                  + " | ".join("" if f is None else f"{f:.1f}" for f in fixed) + " |")
        if scales:
            print(f"(at k x the input, the bare loop's time is taken as k x its measured {base:.1f} s: one process "
                  "streaming its files, its cost per token does not depend on their number)")
    if args.no_stages:
        return
    file_counts, dirs, _, model, _ = corpora[shapes[0]]
    train = os.path.join(dirs[2 if 2 in dirs else file_counts[0]], "train", "00.jsonl.zst")
    costs = stage_costs(train, model, ["sentencepiece", "gigatoken"], seq_len=512, threads=1)
    tokens = costs.pop("tokens")
    print(f"\nPer stage, {train} ({tokens / 1e6:.1f} M tokens), one process, one tokenizer thread:\n")
    print("| step | CPU s | M tokens per CPU-s |")
    print("|---|---:|---:|")
    for step, seconds in costs.items():
        print(f"| {step} | {seconds:.2f} | {tokens / seconds / 1e6:.1f} |")


if __name__ == "__main__":
    main()
