"""Where a DaskRunner job's CPU goes, against DirectRunner's on the same input: driver, scheduler, each worker.

    python scripts/bench/dask_cost.py INPUT_GLOB MODEL [--workers 2] [--threads 1] [--rounds 2]
        [--format tfrecord|megatron|both] [--backend auto] [--warm] [--profile] [--workdir DIR]

Each round runs, as whole commands, `python -m pipeline.run --seq_len 512` on DirectRunner (its
defaults) and on a fresh cluster (a `dask scheduler` and W `dask worker`s of T threads, as
scripts/bench/bench_dask.py starts them; the cluster started before the clock and stopped after),
in that order, then (with --warm) again on the same cluster. Reported per run: wall seconds; CPU
seconds of the command (the driver, with its children), of the scheduler and of the workers (each
worker process with its nanny); the ratio of all of it to DirectRunner's; and whether the shards
are the same bytes. With --profile, Dask's own sampling profile of the tasks on the workers
(`Client.profile`) of the last round's cluster: its heaviest functions, by share of the samples.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import psutil
from bench_dask import Cluster, _cpu, job  # scripts/bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[2]


def _digests(out: Path) -> dict:
    files = [p for p in sorted(out.glob("run-*/*")) if p.suffix in (".tfrecord", ".bin", ".idx")]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _run(cmd: list[str], log: Path, cluster: Cluster | None) -> dict:
    """Wall and CPU seconds of one command, split into the driver, the scheduler and the workers."""
    before = {"scheduler": _cpu(cluster.processes[:1]), "workers": _cpu(cluster.processes[1:])} if cluster else {}
    start = time.time()
    with open(log, "w") as out:
        proc = psutil.Popen(cmd, stdout=out, stderr=out, cwd=REPO, env=_env())
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.time() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{cmd} failed; see {log}")
    row = {"wall": wall, "driver": usage.ru_utime + usage.ru_stime, "scheduler": 0.0, "workers": 0.0}
    if cluster:
        row["scheduler"] = _cpu(cluster.processes[:1]) - before["scheduler"]
        row["workers"] = _cpu(cluster.processes[1:]) - before["workers"]
    row["cpu"] = row["driver"] + row["scheduler"] + row["workers"]
    return row


def _env() -> dict:
    from bench_dask import _env as env

    return env()


def _profile_summary(address: str, top: int = 40) -> None:
    """The workers' task profile (Dask's sampler): the heaviest functions by samples they are on the stack of."""
    from distributed import Client

    with Client(address, timeout=60) as client:
        state = client.profile()
    totals: dict[str, int] = {}

    def walk(node, seen):
        ident = node.get("identifier", "")
        desc = node.get("description", {})
        name = f"{desc.get('filename', '')}:{desc.get('name', '')}"
        if ident != "root" and name not in seen:
            totals[name] = totals.get(name, 0) + node["count"]
            seen = seen | {name}
        for child in node.get("children", {}).values():
            walk(child, seen)

    walk(state, frozenset())
    all_samples = max(1, state.get("count", 1))
    print(f"\nworkers' task profile ({all_samples} samples): share of samples with the function on the stack")
    for name, count in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {count / all_samples:6.1%}  {name.replace(str(REPO) + '/', '')[-110:]}")


def main() -> None:
    """Run the rounds and print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("model")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--format", default="tfrecord", choices=("tfrecord", "megatron", "both"))
    p.add_argument("--backend", default="auto")
    p.add_argument("--warm", action="store_true", help="also run again on the same cluster")
    p.add_argument("--profile", action="store_true", help="summarize the workers' task profile of the last round")
    p.add_argument("--memory_limit", default="4GB")
    p.add_argument("--workdir", default="/tmp/dask_cost")
    args = p.parse_args()
    work = Path(args.workdir)
    formats = ["tfrecord", "megatron"] if args.format == "both" else [args.format]
    rows: dict[tuple, list[dict]] = {}
    for r in range(args.rounds):
        for fmt in formats:
            extra = ["--output_format", fmt]
            out, logs = work / "out", work / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(out, ignore_errors=True)
            direct = _run(job(args.input, out / "direct", args.model, args.backend, extra), logs / f"direct-{fmt}.log",
                          None)
            reference = _digests(out / "direct")
            runs = [("direct", direct)]
            cluster = Cluster(work / "cluster", args.workers, args.threads, args.memory_limit)
            try:
                dask = ["--runner", "DaskRunner", "--dask_client_address", cluster.address]
                for kind in ("fresh", "warm")[: 2 if args.warm else 1]:
                    row = _run(job(args.input, out / kind, args.model, args.backend, extra + dask),
                               logs / f"{kind}-{fmt}.log", cluster)
                    row["same"] = _digests(out / kind) == reference
                    runs.append((kind, row))
                if args.profile and r == args.rounds - 1 and fmt == formats[-1]:
                    _profile_summary(cluster.address)
            finally:
                cluster.stop()
            for kind, row in runs:
                row["ratio"] = row["cpu"] / direct["cpu"]
                rows.setdefault((fmt, kind), []).append(row)
                print(f"round {r} {fmt} {kind}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                                            for k, v in row.items()), flush=True)
    print(f"\nmedians of {args.rounds} round(s); CPU-s: driver + scheduler + workers")
    print("| format | run | wall s | driver | scheduler | workers | all CPU-s | x DirectRunner | shards |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for (fmt, kind), runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("wall", "driver", "scheduler", "workers", "cpu",
                                                                  "ratio")}
        same = "" if kind == "direct" else ("same" if all(r["same"] for r in runs) else "DIFFERENT")
        print(f"| {fmt} | {kind} | {med['wall']:.1f} | {med['driver']:.1f} | {med['scheduler']:.1f} | "
              f"{med['workers']:.1f} | {med['cpu']:.1f} | {med['ratio']:.2f} | {same} |")


if __name__ == "__main__":
    sys.exit(main())
