"""Helpers of the fault suite: the command run as a user runs it, the reader's verdict, small corpora.

Every test here runs real components: `python -m pipeline.run` in its own process (and its Beam
worker processes), real zstd and gzip, a real S3-compatible server (moto's server mode on
127.0.0.1, reached through `AWS_ENDPOINT_URL_S3` as a user reaches MinIO), real kernel permission
checks (a job run without root's power to bypass them) and a real full filesystem (a small tmpfs).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from corpus_helpers import pile_line, write_lines

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "tokenizers" / "sample" / "sample.model")
SAMPLE_TRAIN = str(REPO / "sample_data" / "pile" / "train" / "*.jsonl.zst")
IN_MEMORY = ["--runner", "DirectRunner", "--direct_running_mode", "in_memory", "--direct_num_workers", "1"]
PROCESSES = ["--runner", "DirectRunner", "--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
# Root reads and writes whatever the permissions say, through these two capabilities: a job run
# without them meets the kernel's permission checks as any user would.
_AS_A_USER = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
              "--inh-caps=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
_RUN_LINE = re.compile(r"\(runner \w+, run ([0-9a-f]{16})\)")


def command_env(extra: dict | None = None) -> dict:
    """The environment of a command run by the tests: this checkout's package, and `extra`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env | (extra or {})


def _stopped(proc) -> bool:
    """Every thread of the process stopped (or it is gone): /proc's process status is its main
    thread's, and another thread finishes a write it is in before it stops."""
    try:
        tasks = os.listdir(f"/proc/{proc.pid}/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            stat = Path(f"/proc/{proc.pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended
        if stat[stat.rindex(")") + 2] not in "TtZX":
            return False
    return True


class Job:
    """`python -m pipeline.run ARGV` running in a new session (so it and its workers can be frozen).

    Its output goes to a temporary file, never a pipe: a frozen or chatty job cannot block on it.
    """

    def __init__(self, *argv: str, env: dict | None = None):
        self._log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "pipeline.run", *argv], cwd=REPO, env=command_env(env),
                                     stdout=self._log, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def running(self) -> bool:
        return self.proc.poll() is None

    def freeze(self) -> None:
        """SIGSTOP the job and its worker processes, wherever they are; returns once all have stopped."""
        os.killpg(self.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while True:
            try:
                root = psutil.Process(self.proc.pid)
                group = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            if all(_stopped(p) for p in group):
                return
            assert time.monotonic() < deadline, "the job did not stop"
            time.sleep(0.005)

    def thaw(self) -> None:
        """SIGCONT the job (if it is still there)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)

    def wait_until(self, condition, what: str, timeout: float = 240) -> None:
        """Poll `condition()` until true; fail if the job ends first."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.running(), f"the job ended before {what}:\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def finish(self, timeout: float = 300) -> int:
        """Wait for the job to end; its exit status."""
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()


def command(*argv: str, env: dict | None = None, as_a_user: bool = False, timeout: float = 300):
    """Run `python -m pipeline.run ARGV` to the end, as a user would; returns the CompletedProcess.

    `as_a_user`: without root's power to bypass file permissions.
    """
    prefix = _AS_A_USER if as_a_user else []
    return subprocess.run([*prefix, sys.executable, "-m", "pipeline.run", *argv], cwd=REPO, env=command_env(env),
                          capture_output=True, text=True, timeout=timeout)


def problem_lines(stderr: str) -> list[str]:
    """The lines of a command's stderr that report a problem (errors and tracebacks)."""
    return [line for line in stderr.splitlines() if " ERROR " in line or line.startswith("Traceback")]


def run_id_of(stderr: str) -> str | None:
    """The run id a command logged when its job started."""
    match = _RUN_LINE.search(stderr)
    return match.group(1) if match else None


def accepted(out: str) -> dict | None:
    """The manifest of `out` if the reader accepts the output (every shard checked, sha256 too), else None."""
    from pipeline import tfdata
    from pipeline.format.manifest import ManifestError, load_manifest
    from pipeline.reader.shards import ShardIntegrityError

    try:
        tfdata.make_dataset(out, batch_size=1, shuffle=False, verify=True)
    except (ManifestError, ShardIntegrityError):
        return None
    return load_manifest(out)


def small_corpus(folder: Path, files: int = 2, docs: int = 60, bad: int = 0) -> str:
    """`files` zstd files of `docs` good documents each (plus `bad` malformed lines in the first); the glob."""
    for f in range(files):
        lines = [pile_line(f"document {f}-{i} " + "some words here " * (5 + i % 30), "Wikipedia (en)")
                 for i in range(docs)]
        if f == 0:
            lines[1:1] = [b"{not json"] * bad
        write_lines(str(folder / f"{f:02d}.jsonl.zst"), lines)
    return str(folder / "*.jsonl.zst")
