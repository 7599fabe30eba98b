"""What committing work items costs an uninterrupted run, and what a resume that takes up every item costs.

    python scripts/bench/bench_resume.py --mb 40 --pairs 3 --workdir /tmp/bench_resume [--backends sentencepiece,auto]

Every run of `pile-pipeline run` commits each chunk's result into OUT/.resume/ (docs/operations.md,
"Resuming a killed run"). Paired runs of the same command on real text (scripts/bench/real_text_corpus.py,
a 32k Llama-2-style BPE model trained on it), one committing and one not (this script's own
`--no_commit` wrapper makes the run's output format not resumable: no production switch), in
alternating order; CPU-seconds are the process tree's (the command and every worker process, from
the kernel's accounting of reaped children: `resource.getrusage(RUSAGE_CHILDREN)`), wall seconds
beside them. Then a run that finished its work but not its output (the same wrapper leaves its work
folder, and its manifest and run directory are removed) is taken up with --resume: its CPU against
a clean run's. Prints markdown rows for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "datagen"))

from baseline import REPO  # noqa: E402
from real_text_corpus import compose, train_model, write_files  # noqa: E402

# Run as the command, the work folder switched off (`--no_commit`) or kept after the run (`--keep_work`).
_WRAPPED = """
import sys
import pipeline.beam.launch as launch
if sys.argv[1] == "--no_commit":
    launch.resumable_format = lambda config: False
else:
    launch.finish_work = lambda output_dir: None
from pipeline.cli.run import cli
sys.exit(cli(sys.argv[2:]))
"""


def corpus(workdir: str, mb: float) -> tuple[str, str]:
    """The corpus' glob and its model, made once in `workdir`."""
    train, model = os.path.join(workdir, "corpus", "train"), os.path.join(workdir, "corpus", "real32k.model")
    if not os.path.exists(model):
        lines = compose(int(mb * 1e6))
        write_files(lines, train, 4)
        train_model(lines, model[: -len(".model")])
    return os.path.join(train, "*.jsonl.zst"), model


def timed(argv: list[str], wrapper: str | None = None) -> tuple[float, float]:
    """(wall s, CPU-s of the process tree) of one run of the command."""
    cmd = [sys.executable, "-c", _WRAPPED, wrapper, *argv] if wrapper else [sys.executable, "-m", "pipeline.run",
                                                                              *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": REPO},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    if done.returncode:
        raise SystemExit(f"{cmd} failed:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median(values: list[float]) -> float:
    values, half = sorted(values), len(values) // 2
    return values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2


def main() -> None:
    """Run the pairs and the resume, print the rows."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=40, help="MB (1e6 bytes) of JSON lines")
    p.add_argument("--pairs", type=int, default=3, help="paired runs per backend, in alternating order")
    p.add_argument("--backends", default="sentencepiece,auto")
    p.add_argument("--workdir", default="/tmp/bench_resume")
    args = p.parse_args()
    pattern, model = corpus(args.workdir, args.mb)
    out = os.path.join(args.workdir, "out")
    print("| backend | CPU-s committing / not (medians) | overhead, medians (each pair) | wall s committing / not |")
    print("|---|---|---|---|")
    for backend in args.backends.split(","):
        argv = ["--input", pattern, "--tokenizer_model", model, "--tokenizer_backend", backend, "--seq_len", "2048",
                "--output_dir", out, "--progress_every", "0"]
        timed([*argv, "--overwrite"])  # warm the page cache and the compiled caches
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(args.pairs):
            for commit in ((True, False) if i % 2 == 0 else (False, True)):
                shutil.rmtree(out, ignore_errors=True)
                runs[commit].append(timed(argv, None if commit else "--no_commit"))
        cpu = {c: [r[1] for r in runs[c]] for c in runs}
        pairs = ", ".join(f"{(a / b - 1) * 100:+.1f}%" for a, b in zip(cpu[True], cpu[False], strict=True))
        print(f"| {backend} | {median(cpu[True]):.1f} / {median(cpu[False]):.1f} | "
              f"{(median(cpu[True]) / median(cpu[False]) - 1) * 100:+.1f}% ({pairs}) | "
              f"{median([r[0] for r in runs[True]]):.1f} / {median([r[0] for r in runs[False]]):.1f} |")
        # A run whose every work item is committed, its output not: taken up with --resume.
        shutil.rmtree(out, ignore_errors=True)
        timed(argv, "--keep_work")
        os.remove(os.path.join(out, "manifest.json"))
        for name in os.listdir(out):
            if name.startswith("run-"):
                shutil.rmtree(os.path.join(out, name))
        wall, resumed = timed([*argv, "--resume"])
        print(f"| {backend}: --resume taking up every item | {resumed:.1f} CPU-s, {wall:.1f} s | "
              f"{resumed / median(cpu[True]) * 100:.0f}% of a clean run's CPU | |")


if __name__ == "__main__":
    main()
