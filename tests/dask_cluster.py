"""A real dask.distributed cluster for the tests: a `dask scheduler` and `dask worker` processes on loopback.

The processes are the ones a user starts on a cluster's hosts (`python -m dask scheduler`, `python -m
dask worker`, each worker under its nanny, which restarts it when it dies), not threads of the test:
the job's code reaches them pickled, as it reaches any cluster. The workers import this checkout
(PYTHONPATH), and get the environment the test gives (e.g. a loopback S3 server's, s3_server.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Cluster:
    """A running scheduler and its workers; `client` is the test's own connection to the scheduler."""

    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen]
    client: object
    folder: Path

    def worker_pids(self) -> dict[str, int]:
        """{worker address: pid of the worker process (the nanny's child)}."""
        return self.client.run(os.getpid)

    def kill_worker(self) -> int:
        """SIGKILL one worker process (its nanny starts a new one); returns its pid."""
        address, pid = sorted(self.worker_pids().items())[0]
        os.kill(pid, signal.SIGKILL)
        return pid

    def logs(self) -> str:
        """The scheduler's and the workers' output so far (for failure messages)."""
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.folder.glob("*.log")))


def cluster_env(extra: dict | None = None) -> dict:
    """The environment of the cluster's processes: this checkout first on the path, `extra` on top."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "scripts" / "datagen"), env.get("PYTHONPATH", "")])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env | (extra or {})


class Driver:
    """`python -m pipeline.run` against a cluster, its log in a file the test reads as it grows."""

    def __init__(self, argv: list[str], log: Path, env: dict | None = None):
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", *argv], cwd=REPO, env=cluster_env(env),
                                         stdout=out, stderr=subprocess.STDOUT, text=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, found, what: str, timeout: float = 300):
        """Poll until `found()` gives something (returned); fail if the job ends first."""
        import pytest

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = found()
            if result:
                return result
            if self.proc.poll() is not None:
                pytest.fail(f"the job ended before {what}:\n{self.text()[-3000:]}")
            time.sleep(0.02)
        pytest.fail(f"no {what} in {timeout} s:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 600) -> int:
        return self.proc.wait(timeout=timeout)


def kill_a_busy_worker(cluster, while_frozen=None) -> bool:
    """Freeze every worker, SIGKILL one that is running tasks (the first if none is), let the others go on.

    `while_frozen()` runs while nothing moves (to see what the killed worker leaves). Returns whether
    the one killed was running a task (so that Dask has a task to run again).
    """
    pids = cluster.worker_pids()
    for pid in pids.values():
        os.kill(pid, signal.SIGSTOP)
    try:
        busy = [address for address, keys in cluster.client.processing().items() if keys and address in pids]
        if while_frozen is not None:
            while_frozen()
        os.kill(pids[sorted(busy)[0] if busy else sorted(pids)[0]], signal.SIGKILL)
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    return bool(busy)


def _start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=REPO, start_new_session=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def dask_cluster(folder: Path, workers: int = 2, threads: int = 1, env: dict | None = None,
                 memory_limit: str = "3GB"):
    """A scheduler and `workers` worker processes of `threads` threads each; yields a Cluster."""
    from distributed import Client

    folder.mkdir(parents=True, exist_ok=True)
    env = cluster_env(env)
    scheduler_file = folder / "scheduler.json"
    scheduler = _start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                        str(scheduler_file)], folder / "scheduler.log", env)
    procs = [scheduler]
    client = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            if scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the dask scheduler did not start:\n" + (folder / "scheduler.log").read_text())
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        for i in range(workers):
            procs.append(_start(["worker", address, "--name", f"w{i}", "--nthreads", str(threads), "--no-dashboard",
                                 "--host", "127.0.0.1", "--memory-limit", memory_limit, "--local-directory",
                                 str(folder / f"w{i}")], folder / f"worker-{i}.log", env))
        client = Client(address, timeout=60)
        client.wait_for_workers(workers, timeout=120)
        yield Cluster(address, scheduler, procs[1:], client, folder)
    finally:
        if client is not None:
            client.close()
        _stop(procs[1:] + procs[:1])
