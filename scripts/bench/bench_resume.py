"""What committing work items costs an uninterrupted run, and what a resume that takes up every item costs.

    python scripts/bench/bench_resume.py --mb 40 --pairs 3 --workdir /tmp/bench_resume [--backends sentencepiece,auto]

Every run of `pile-pipeline run` commits each chunk's result into OUT/.resume/ (docs/resume.md).
Paired runs of the same command on real text (scripts/bench/real_text_corpus.py, a 32k Llama-2-style
BPE model trained on it), one committing and one not (this script's own `--no_commit` wrapper makes
the run's output format not resumable: no production switch), in
alternating order; CPU-seconds are the process tree's (the command and every worker process, from
the kernel's accounting of reaped children: `resource.getrusage(RUSAGE_CHILDREN)`), wall seconds
beside them. Paired runs differ by a few percent either way on a shared machine, so the cost is also
timed where it is spent: the CPU of the run's threads in what committing adds (`components`), against
the run's own. Then a run that finished its work but not its output (the same wrapper leaves its work
folder, and everything else is removed) is taken up with --resume: its CPU against a clean run's
(start-up, the tokenizer's self-check and the shards are most of it). Prints markdown rows for
docs/benchmarks.md.
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

# Run as `python -m pipeline.run` runs the command (its start-up tricks included), the work folder
# left as it is (`--commit`), switched off (`--no_commit`) or kept after the run (`--keep_work`).
_WRAPPED = """
import sys
from pipeline.cli.main import exiting
from pipeline.core.extras import guarded
from pipeline.run import _cli
from pipeline.startup.command import one_command_per_process
one_command_per_process()
import pipeline.beam.launch as launch
if sys.argv[1] == "--no_commit":
    launch.resumable_format = lambda config: False
elif sys.argv[1] == "--keep_work":
    launch.finish_work = lambda output_dir: None
sys.exit(exiting(guarded(_cli, sys.argv[2:], "pile-pipeline run")))
"""


def corpus(workdir: str, mb: float) -> tuple[str, str]:
    """The corpus' glob and its model, made once in `workdir`."""
    train, model = os.path.join(workdir, "corpus", "train"), os.path.join(workdir, "corpus", "real32k.model")
    if not os.path.exists(model):
        lines = compose(int(mb * 1e6))
        write_files(lines, train, 4)
        train_model(lines, model[: -len(".model")])
    return os.path.join(train, "*.jsonl.zst"), model


def timed(argv: list[str], wrapper: str = "--commit") -> tuple[float, float]:
    """(wall s, CPU-s of the process tree) of one run of the command."""
    cmd = [sys.executable, "-c", _WRAPPED, wrapper, *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": REPO},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - start
    if done.returncode:
        raise SystemExit(f"{cmd} failed:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def components(argv: list[str]) -> tuple[float, float]:
    """(CPU-s of the run, CPU-s its threads spent on what committing adds), the job in this process.

    What committing adds, timed where it runs (`time.thread_time`, the calling thread's own CPU): each
    chunk's result committed and looked up, the content terms of what was read, each work item's
    record. The workers are threads of this process (DirectRunner's default here).
    """
    import threading

    from pipeline.beam import read
    from pipeline.cli import run
    from pipeline.process import commit

    spent, lock = [0.0], threading.Lock()

    def timed_fn(fn):
        def wrapper(*args, **kwargs):
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    spent[0] += time.thread_time() - start
        return wrapper

    patched = [(commit, "commit_result"), (commit, "fetch_result"), (commit, "commit_unit"), (read, "lines_term")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in patched]
    saved_of = commit.ReadInfo.__dict__["of"]
    for owner, name, fn in saved:
        setattr(owner, name, timed_fn(fn))
    commit.ReadInfo.of = classmethod(timed_fn(saved_of.__func__))
    try:
        start = time.process_time()
        run.main(argv)
        return time.process_time() - start, spent[0]
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
        commit.ReadInfo.of = saved_of


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
        shutil.rmtree(out, ignore_errors=True)
        timed(argv)  # warm the page cache and the compiled caches
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(args.pairs):
            for commit in ((True, False) if i % 2 == 0 else (False, True)):
                shutil.rmtree(out, ignore_errors=True)
                runs[commit].append(timed(argv, "--commit" if commit else "--no_commit"))
        cpu = {c: [r[1] for r in runs[c]] for c in runs}
        pairs = ", ".join(f"{(a / b - 1) * 100:+.1f}%" for a, b in zip(cpu[True], cpu[False], strict=True))
        print(f"| {backend} | {median(cpu[True]):.1f} / {median(cpu[False]):.1f} | "
              f"{(median(cpu[True]) / median(cpu[False]) - 1) * 100:+.1f}% ({pairs}) | "
              f"{median([r[0] for r in runs[True]]):.1f} / {median([r[0] for r in runs[False]]):.1f} |")
        # A run whose every work item is committed, its output not: taken up with --resume.
        shutil.rmtree(out, ignore_errors=True)
        timed(argv, "--keep_work")
        for name in os.listdir(out):  # what a run killed after its last work item leaves: its work folder
            if name != ".resume":
                path = os.path.join(out, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        wall, resumed = timed([*argv, "--resume"])
        print(f"| {backend}: --resume taking up every item | {resumed:.1f} CPU-s, {wall:.1f} s | "
              f"{resumed / median(cpu[True]) * 100:.0f}% of a clean run's CPU | |")
        shutil.rmtree(out, ignore_errors=True)
        total, committing = components(argv)
        print(f"| {backend}: committing, timed in the run's threads | {committing:.2f} of {total:.1f} CPU-s | "
              f"{committing / total * 100:.1f}% | |")


if __name__ == "__main__":
    main()
