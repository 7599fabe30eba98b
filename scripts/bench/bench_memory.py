"""Peak memory of a DirectRunner job against input size: when to move to a distributed runner.

    python scripts/bench/bench_memory.py --scales 1 4 16 --out /tmp/memory.md

For each scale it writes a Pile-layout corpus (`python scripts/datagen/sample_corpus.py DIR --scale S`;
scale 1 is ~15 MB of decompressed train text in 4 files), runs `python -m pipeline.run` on it in
a subprocess (DirectRunner, worker threads (`--mode`), `--direct_num_workers` workers by default) and
samples, every 50 ms, the resident memory of the whole process tree (driver + worker processes,
found with psutil), keeping the peak of the sum and the peak of the largest single process. The
sum of RSS counts shared pages once per process, so it overstates the tree a little: a safe bound.

The result is a Markdown table plus a linear fit (peak RSS = a + b x decompressed input) and the
input size at which the fit reaches a machine's memory.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import zstandard

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_CORPUS = os.path.join(REPO, "scripts", "datagen", "sample_corpus.py")
MB = 1 << 20


def tree_rss(proc: psutil.Process) -> tuple[int, int, int, int]:
    """(sum of RSS, largest single RSS, the root's RSS, process count) of a process and its descendants."""
    total, largest, root, count = 0, 0, 0, 0
    try:
        members = [proc] + proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0, 0, 0
    for p in members:
        try:
            rss = p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += rss
        largest = max(largest, rss)
        root = rss if p.pid == proc.pid else root
        count += 1
    return total, largest, root, count


def decompressed_size(paths: list[str]) -> int:
    size = 0
    for path in paths:
        with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as reader:
            while block := reader.read(1 << 22):
                size += len(block)
    return size


def measure(argv: list[str], interval: float = 0.05) -> dict:
    """Run `python -m pipeline.run ARGV`, sampling the process tree's memory until it exits."""
    start = time.monotonic()
    log = tempfile.TemporaryFile()
    popen = subprocess.Popen([sys.executable, "-m", "pipeline.run", *argv], cwd=REPO, stdout=log, stderr=log)
    proc = psutil.Process(popen.pid)
    peak_sum = peak_single = peak_driver = max_procs = 0
    while popen.poll() is None:
        total, largest, driver, count = tree_rss(proc)
        peak_sum, peak_single = max(peak_sum, total), max(peak_single, largest)
        peak_driver, max_procs = max(peak_driver, driver), max(max_procs, count)
        time.sleep(interval)
    wall = time.monotonic() - start
    if popen.returncode != 0:
        log.seek(0)
        raise RuntimeError(f"pipeline failed ({popen.returncode}):\n{log.read().decode()[-3000:]}")
    return {"peak_tree_mb": peak_sum / MB, "peak_process_mb": peak_single / MB,
            "peak_driver_mb": peak_driver / MB, "processes": max_procs, "wall_s": wall}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", type=float, nargs="+", default=[1, 4, 16])
    p.add_argument("--workers", type=int, default=2, help="--direct_num_workers (default 2)")
    p.add_argument("--mode", default="multi_threading", choices=("multi_threading", "multi_processing", "in_memory"))
    p.add_argument("--fan_out", default="auto", choices=("auto", "yes", "no"), help="the pipeline's --fan_out")
    p.add_argument("--tokenizer_model", default=os.path.join(REPO, "tokenizers/sample/sample.model"))
    p.add_argument("--work_dir", default=None, help="where corpora and outputs go (default: a temp dir)")
    p.add_argument("--out", default=None, help="write the Markdown report here")
    p.add_argument("--json", default=None, help="also write the raw rows here")
    p.add_argument("--render", default=None, help="only re-render the report from rows saved with --json")
    args = p.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            rows = json.load(f)
        args.scales = [r["scale"] for r in rows]
        report = render(rows, args)
        print(report)
        if args.out:
            with open(args.out, "w") as f:
                f.write(report)
        return

    work = args.work_dir or tempfile.mkdtemp(prefix="bench-memory-")
    rows = []
    try:
        for scale in args.scales:
            corpus = os.path.join(work, f"corpus-{scale:g}")
            if not os.path.exists(os.path.join(corpus, "train")):
                subprocess.run([sys.executable, SAMPLE_CORPUS, corpus, "--scale", str(scale)],
                               cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            files = sorted(glob.glob(os.path.join(corpus, "train", "*.jsonl.zst")))
            out = os.path.join(work, f"out-{scale:g}")
            run_argv = ["--input", os.path.join(corpus, "train", "*.jsonl.zst"), "--output_dir", out,
                        "--tokenizer_model", args.tokenizer_model, "--overwrite",
                        "--direct_running_mode", args.mode, "--direct_num_workers", str(args.workers),
                        "--fan_out", args.fan_out]
            result = measure(run_argv)
            with open(os.path.join(out, "manifest.json")) as f:
                manifest = json.load(f)
            row = {
                "scale": scale,
                "files": len(files),
                "compressed_mb": sum(os.path.getsize(f) for f in files) / MB,
                "decompressed_mb": decompressed_size(files) / MB,
                "documents": manifest["totals"]["documents_kept"],
                "tokens_m": manifest["totals"]["label_tokens"] / 1e6,
                "output_mb": manifest["totals"]["bytes"] / MB,
                **result,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)

    report = render(rows, args)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def render(rows: list[dict], args) -> str:
    lines = [
        f"DirectRunner `{args.mode}`, `--direct_num_workers {args.workers}`, `--fan_out {args.fan_out}`, "
        "seq_len 2048, one shard; "
        f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / (1 << 30):.0f} GiB RAM, "
        f"Python {platform.python_version()}; `python scripts/bench/bench_memory.py --scales "
        f"{' '.join(f'{s:g}' for s in args.scales)}"
        + (f" --mode {args.mode}" if args.mode != "multi_threading" else "")
        + (f" --workers {args.workers}" if args.workers != 2 else "")
        + (f" --fan_out {args.fan_out}" if args.fan_out != "auto" else "") + "`.",
        "",
        "| scale | input files | compressed MB | decompressed MB | documents | tokens (M) | output MB "
        "| wall s | peak RSS, process tree MB | peak RSS, driver MB | peak RSS, largest process MB | processes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scale']:g} | {r['files']} | {r['compressed_mb']:.1f} | {r['decompressed_mb']:.1f} | "
            f"{r['documents']} | {r['tokens_m']:.2f} | {r['output_mb']:.1f} | {r['wall_s']:.0f} | "
            f"{r['peak_tree_mb']:.0f} | {r['peak_driver_mb']:.0f} | {r['peak_process_mb']:.0f} | "
            f"{r['processes']} |"
        )
    if len(rows) < 2:
        return "\n".join(lines) + "\n"
    a, b = fit([r["decompressed_mb"] for r in rows], [r["peak_tree_mb"] for r in rows])
    da, db = fit([r["decompressed_mb"] for r in rows], [r["peak_driver_mb"] for r in rows])
    lines += ["", f"Linear fit: peak RSS of the tree ≈ {a:.0f} MB + {b:.2f} × decompressed input MB; "
              f"of the driver alone ≈ {da:.0f} MB + {db:.2f} × decompressed input MB."]
    if b > 0.05:
        for ram_gib in (16, 64, 256):
            limit = (ram_gib * 1024 * 0.8 - a) / b
            lines.append(f"- {ram_gib} GiB machine (80% usable): about {limit / 1024:.1f} GiB of decompressed input "
                         "(fit of the tree).")
    else:
        lines.append("- The peak hardly grows with the input: at this slope memory is not what limits DirectRunner.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
