"""The job on a dask.distributed cluster (Beam's DaskRunner) against DirectRunner, on >= 1 GB of real text.

    python scripts/bench/bench_dask.py [--mb 1100] [--files 8] [--workers 1,2,4] [--threads 1,2]
        [--scale 4] [--backend auto] [--workdir DIR] [--memory_limit 4GB]

1. Corpus: scripts/bench/real_text_corpus.py's `base` shape, --mb MB of JSON lines of this machine's
   real text in --files .jsonl.zst files, its 32k BPE model, and the same documents --scale times
   over (bench_pipeline.py `corpus`; made once in --workdir).
2. Timed, each as whole commands: `python -m pipeline.run --tokenizer_backend BACKEND --seq_len 512`
   on DirectRunner (its defaults: a worker per core), and on a cluster started for each run: a
   `dask scheduler` and W `dask worker` processes of T threads each (each worker under its nanny,
   as `dask worker` starts them), the job given `--dask_client_address`; W x T from --workers and
   --threads. The cluster is started before the clock starts and stopped after it stops.
3. For each run: wall seconds of the command; CPU seconds of everything that ran for it (the
   command's process tree, and the scheduler, nannies and workers); peak RssAnon of each worker
   process (sampled every 0.2 s: memory the kernel cannot drop; a nanny's own ~100 MB left out) and
   of the command's tree. At --scale x the input: DirectRunner and the cluster of 2 workers x 1
   thread, to see whether a worker's memory grows with the input.
4. Checks: every Dask run's shards are DirectRunner's, byte for byte.
Prints Markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from bench_pipeline import corpus  # scripts/bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[2]


def _anon_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("RssAnon:")), 0)
    except OSError:
        return 0


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


class Sampler:
    """Peak RssAnon (KiB), sampled every 0.2 s: the command's tree, and each worker (a nanny's children)."""

    def __init__(self, command: psutil.Process, nannies: list[psutil.Process]):
        self.command, self.nannies = command, nannies
        self.command_peak, self.worker_peaks = 0, [0] * len(nannies)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.command_peak = max(self.command_peak, sum(_anon_kib(p.pid) for p in _tree(self.command)))
            for i, nanny in enumerate(self.nannies):
                workers = _tree(nanny)[1:]
                self.worker_peaks[i] = max(self.worker_peaks[i], sum(_anon_kib(p.pid) for p in workers))
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _cpu(procs: list[psutil.Process]) -> float:
    """CPU seconds of processes and their children, counted once each."""
    seen, total = set(), 0.0
    for root in procs:
        for p in _tree(root):
            if p.pid in seen:
                continue
            seen.add(p.pid)
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "scripts" / "datagen"), env.get("PYTHONPATH", "")])
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


class Cluster:
    """A scheduler and `workers` worker processes of `threads` threads on loopback (as tests/dask_cluster.py)."""

    def __init__(self, folder: Path, workers: int, threads: int, memory_limit: str):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        scheduler_file = folder / "scheduler.json"
        log = open(folder / "cluster.log", "ab")  # noqa: SIM115 -- kept open as long as the cluster
        self._log = log
        start = [sys.executable, "-m", "dask"]
        self.scheduler = subprocess.Popen([*start, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                           "--scheduler-file", str(scheduler_file)], env=_env(), stdout=log,
                                          stderr=log)
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            time.sleep(0.1)
        self.address = json.loads(scheduler_file.read_text())["address"]
        self.workers = [subprocess.Popen([*start, "worker", self.address, "--nthreads", str(threads), "--no-dashboard",
                                          "--host", "127.0.0.1", "--memory-limit", memory_limit, "--local-directory",
                                          str(folder / f"w{i}")], env=_env(), stdout=log, stderr=log)
                        for i in range(workers)]
        from distributed import Client

        with Client(self.address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=300)
        self.processes = [psutil.Process(p.pid) for p in [self.scheduler, *self.workers]]

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            p.terminate()
        for p in [*self.workers, self.scheduler]:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        self._log.close()


def job(pattern: str, out: Path, model: str, backend: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pipeline.run", "--input", pattern, "--output_dir", str(out), "--tokenizer_model",
            model, "--tokenizer_backend", backend, "--seq_len", "512", "--overwrite", *extra]


def timed(cmd: list[str], log: Path, cluster: Cluster | None = None) -> dict:
    """Run a command to its end: wall, CPU (with the cluster's), peak memory of the command and of each worker."""
    cluster_cpu = _cpu(cluster.processes) if cluster else 0.0
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=_env())
        sampler = Sampler(psutil.Process(proc.pid), [psutil.Process(p.pid) for p in cluster.workers] if cluster else [])
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - start
        sampler.stop()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{cmd} failed; see {log}")
    cpu = usage.ru_utime + usage.ru_stime + (_cpu(cluster.processes) - cluster_cpu if cluster else 0.0)
    return {"wall": wall, "cpu": cpu, "command_mb": sampler.command_peak / 1024,
            "worker_mb": [k / 1024 for k in sampler.worker_peaks]}


def shard_digests(out: Path) -> dict:
    """sha256 of every shard by name (the run directory left out)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("run-*/*.tfrecord"))}


def main() -> None:
    """Run the benchmark and print the tables."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=1100, help="MB (1e6 bytes) of JSON lines")
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--workers", default="1,2,4", help="worker processes of each cluster")
    p.add_argument("--threads", default="1", help="threads per worker")
    p.add_argument("--scale", type=int, default=4, help="also run DirectRunner and 2 workers x 1 at K x the input")
    p.add_argument("--backend", default="auto")
    p.add_argument("--memory_limit", default="4GB", help="each worker's --memory-limit")
    p.add_argument("--workdir", default="/tmp/bench_dask")
    p.add_argument("--skip", default="", help="runs left out, by their log's name (e.g. x4-direct-0x0)")
    args = p.parse_args()
    work = Path(args.workdir)
    dirs, scaled, _, model, description = corpus(str(work), args.mb, [args.files], "base",
                                                 scales=(args.scale,) if args.scale > 1 else ())
    inputs = {1: os.path.join(dirs[args.files], "train", "*.jsonl.zst")}
    if args.scale > 1:
        inputs[args.scale] = os.path.join(scaled[args.scale], "train", "*.jsonl.zst")
    print(description, flush=True)
    rows = []
    workers, threads = [int(w) for w in args.workers.split(",")], [int(t) for t in args.threads.split(",")]
    # The first thread count's rows first, then the scaled input's, then the other thread counts'.
    plans = [(1, "direct", 0, 0)] + [(1, "dask", w, threads[0]) for w in workers]
    if args.scale > 1:
        plans += [(args.scale, "direct", 0, 0), (args.scale, "dask", 2, 1)]
    plans += [(1, "dask", w, t) for t in threads[1:] for w in workers]
    reference = None
    for scale, runner, workers, threads in plans:
        if f"x{scale}-{runner}-{workers}x{threads}" in args.skip.split(","):
            continue
        out = work / "out" / f"x{scale}-{runner}-{workers}x{threads}"
        log = work / "logs" / f"x{scale}-{runner}-{workers}x{threads}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cluster = None
        try:
            if runner == "dask":
                cluster = Cluster(work / "cluster", workers, threads, args.memory_limit)
                extra = ["--runner", "DaskRunner", "--dask_client_address", cluster.address]
            else:
                extra = []
            result = timed(job(inputs[scale], out, model, args.backend, extra), log, cluster)
        finally:
            if cluster is not None:
                cluster.stop()
        digests = shard_digests(out)
        if scale == 1 and runner == "direct":
            reference = digests
        same = "" if scale != 1 or runner == "direct" else ("same shards" if digests == reference else "DIFFERENT")
        rows.append((scale, runner, workers, threads, result, same))
        worker_mb = ", ".join(f"{m:.0f}" for m in result["worker_mb"]) or "-"
        print(f"x{scale} {runner} {workers}x{threads}: {result['wall']:.1f} s wall, {result['cpu']:.1f} CPU-s, "
              f"command {result['command_mb']:.0f} MB, workers {worker_mb} MB {same}", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    print("\n| input | runner | workers x threads | wall s | CPU-s | peak RssAnon per worker, MB | command, MB | "
          "shards |\n|---|---|---|---:|---:|---|---:|---|")
    for scale, runner, workers, threads, r, same in rows:
        print(f"| {scale}x | {'DirectRunner' if runner == 'direct' else 'DaskRunner'} | "
              f"{f'{workers} x {threads}' if workers else 'default'} | {r['wall']:.1f} | {r['cpu']:.1f} | "
              f"{', '.join(f'{m:.0f}' for m in r['worker_mb']) or '-'} | {r['command_mb']:.0f} | {same} |")


if __name__ == "__main__":
    main()
