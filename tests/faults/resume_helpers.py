"""Helpers of the resume tests: a job killed at a point it shows from outside, its work folder, outputs compared.

A kill point is reached by observable progress, never by time: the number of work items the job
has committed in OUT/.resume/, a shard appearing in its run directory. Then the job (the driver
and its worker processes, its whole process group) is frozen, the committed items are counted
while nothing moves, and it is killed with SIGKILL: the count is exactly what the killed run left.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time
from pathlib import Path

from corpus_helpers import output_digests, run_free
from fault_helpers import Job

WORK = ".resume"


def committed(out: Path, kind: str = "result") -> int:
    """Work items of `kind` committed in OUT/.resume/ (temporary names, still being written, not counted)."""
    root = out / WORK / kind
    count = 0
    for _, _, names in os.walk(root):
        count += sum(1 for name in names if name.endswith(".item") and not name.startswith("."))
    return count


def items(out: Path, kind: str = "result") -> list[Path]:
    """The committed work items of `kind`, in name order."""
    return sorted(p for p in (out / WORK / kind).rglob("*.item") if not p.name.startswith("."))


def kill_when(job: Job, condition, what: str, timeout: float = 300) -> None:
    """Wait for `condition()`, freeze the job (every process of it), then SIGKILL its process group."""
    job.wait_until(condition, what, timeout)
    job.freeze()
    os.killpg(job.proc.pid, signal.SIGKILL)
    job.proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(job.proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def resumed_digests(out: Path) -> dict:
    """Every file's sha256, run-free; the manifest without its `resume` entry (all that differs from a clean run's)."""
    digests = output_digests(out)
    manifest = run_free(json.loads((out / "manifest.json").read_text()))
    manifest.pop("resume")
    digests["manifest.json"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    return digests


def shard_appeared(out: Path) -> bool:
    """A shard, or a shard's temporary file, in a run directory: the job is writing shards."""
    return any(p.name.endswith(".tfrecord") or ".tfrecord.tmp-" in p.name
               for run in out.glob("run-*") for p in run.iterdir())


def thaw_quietly(job: Job) -> None:
    """Let a frozen job go on (if it is still there)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.proc.pid, signal.SIGCONT)
