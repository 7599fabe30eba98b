"""SIGTERM (what `timeout`, systemd and Kubernetes send) and SIGINT end a run with one line: its
worker processes stopped, and nothing of it left (temp folder, lock, spill files, its run
directory) but its work folder, the work items it finished, which --resume takes up
(tests/faults/test_resume_kills.py). What a SIGKILLed run leaves in the temp dir is cleared by the next run.

Real signals to a real command running real Beam workers, as `timeout` sends them: to the command's
process only.
"""

from __future__ import annotations

import os
import signal
import subprocess

import psutil
import pytest
from fault_helpers import IN_MEMORY, MODEL, PROCESSES, REPO, Job, command, problem_lines, small_corpus

pytestmark = pytest.mark.slow


def _session(job: Job) -> list[psutil.Process]:
    """The live processes of the job's session (it and every worker it started)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == job.proc.pid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (OSError, psutil.Error):
            pass
    return found


def _left(out) -> list[str]:
    """What a stopped run left in its output directory, its work folder (OUT/.resume/, for --resume) aside."""
    return sorted(name for name in os.listdir(out) if name != ".resume") if out.exists() else []


def _started(tmp_path, mode):
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "out"
    inputs = small_corpus(tmp_path / "in", files=4, docs=600)
    job = Job("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
              "--chunk_mb", "0.02", *mode, env={"TMPDIR": str(temp)})
    # Mid-job: it has written into the output directory (its lock, spill files, its run directory).
    job.wait_until(lambda: "input files ->" in job.output() and "reading" in job.output(), "the job reads")
    return job, temp, out


@pytest.mark.parametrize("mode", [PROCESSES, IN_MEMORY], ids=["processes", "in_memory"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_run_cleanly(tmp_path, mode, signum):
    job, temp, out = _started(tmp_path, mode)
    os.kill(job.proc.pid, signum)
    status = job.finish(timeout=120)
    output = job.output()
    assert status == 128 + signum, output[-3000:]
    lines = problem_lines(output)
    assert len(lines) == 1, output[-5000:]
    (line,) = lines
    assert f"stopped by {signal.Signals(signum).name}: the workers were stopped" in line
    assert "Traceback" not in output
    assert _session(job) == []  # no worker left running
    assert os.listdir(temp) == []  # the run's temp folder
    assert _left(out) == []  # lock, spill files, run directory


def test_what_a_sigkilled_run_leaves_in_the_temp_dir_is_cleared_by_the_next_run(tmp_path):
    job, temp, _ = _started(tmp_path, PROCESSES)
    os.killpg(job.proc.pid, signal.SIGKILL)
    job.finish(timeout=60)
    left = os.listdir(temp)
    assert left and all(name.startswith("pile-pipeline-") for name in left)
    other = temp / "pile-pipeline-of-another-version"  # no lock file: not known to be abandoned, kept
    other.mkdir()
    proc = command("--input", str(tmp_path / "nothing-*.jsonl"), "--output_dir", str(tmp_path / "o2"),
                   "--tokenizer_model", MODEL, env={"TMPDIR": str(temp)})
    assert proc.returncode == 2
    assert os.listdir(temp) == [other.name]


@pytest.mark.slow
def test_a_signal_never_aborts_the_process_after_its_cleanup(tmp_path):
    """A worker thread still inside a native tokenizer call when the interpreter finalized was made to exit
    through C++ frames: `terminate called without an active exception`, SIGABRT (exit 134), in 1 run of 3
    to 6 (Megatron output, 1 MB chunks). Ten runs, SIGINT and SIGTERM in turn: a 1-in-3 failure passes
    all ten with probability (2/3)^10 < 2%.
    """
    import time

    inputs = small_corpus(tmp_path / "in", files=4, docs=600)
    for k in range(10):
        signum = (signal.SIGINT, signal.SIGTERM)[k % 2]
        out = tmp_path / f"out{k}"
        job = Job("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                  "--output_format", "megatron", "--chunk_mb", "1")
        job.wait_until(lambda job=job: "reading" in job.output(), "the job reads")
        time.sleep(0.3)  # tokenizing: the workers are inside the tokenizer's native code
        os.kill(job.proc.pid, signum)
        status = job.finish(timeout=120)
        output = job.output()
        assert status == 128 + signum, (k, output[-3000:])
        assert "terminate called" not in output and "Traceback" not in output, (k, output[-3000:])
        assert len(problem_lines(output)) == 1, (k, output[-3000:])
        assert _left(out) == []


def _children(pid: int) -> list[str]:
    """The children of `pid` (every thread's), from /proc: quick enough to catch a worker as it starts."""
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += f.read().split()
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_a_signal_as_the_workers_start_stops_every_one_before_the_command_ends(tmp_path):
    """SIGTERM the moment DirectRunner starts its first worker process (through a shell), while it starts the
    next: a worker started after the stop kept the command waiting for it forever (1 run in 3), or one whose
    shell was stopped first ran on after the command's exit. Eight runs: each must end within a minute,
    with no process of its session left the moment it has. (2/3)^8 < 4%.
    """
    inputs = small_corpus(tmp_path / "in", files=4, docs=600)
    for k in range(8):
        out = tmp_path / f"out{k}"
        job = Job("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
                  "--chunk_mb", "0.02", *PROCESSES)
        while not _children(job.proc.pid):
            assert job.running(), job.output()[-3000:]
        os.kill(job.proc.pid, signal.SIGTERM)
        try:
            status = job.finish(timeout=60)
        except subprocess.TimeoutExpired:
            left = _session(job)
            os.killpg(job.proc.pid, signal.SIGKILL)
            pytest.fail(f"run {k}: the command did not end after SIGTERM ({len(left)} processes of it left)")
        left = _session(job)
        assert status == 128 + signal.SIGTERM and left == [], (k, left, job.output()[-3000:])
        assert len(problem_lines(job.output())) == 1, (k, job.output()[-3000:])


@pytest.mark.slow
def test_a_signal_stops_a_job_on_a_local_dask_cluster_with_one_line(tmp_path):
    """Beam's local Dask cluster (no scheduler given): its processes stopped, one line. multiprocessing's resource
    tracker is left to end with the command: stopped, it was started again, and the new one reported each
    semaphore the cluster released as unknown (12 KeyError tracebacks before the one line)."""
    import time

    inputs = small_corpus(tmp_path / "in", files=6, docs=6000)
    out = tmp_path / "out"
    job = Job("--input", inputs, "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32",
              "--chunk_mb", "0.02", "--runner", "DaskRunner", "--progress_every", "0.2")
    job.wait_until(lambda: "input tokenized" in job.output(), "the job tokenizes")
    time.sleep(1)
    os.kill(job.proc.pid, signal.SIGTERM)
    status = job.finish(timeout=120)
    output = job.output()
    assert status == 128 + signal.SIGTERM and "Traceback" not in output, output[-5000:]
    assert len(problem_lines(output)) == 1, output[-5000:]
    deadline = time.monotonic() + 10  # the resource tracker ends as its pipe from the command closes
    while _session(job) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _session(job) == []
    assert _left(out) == []


def _part_shards(out) -> list[str]:
    """The shards written in the output's parts (a bucket's or a subset's directory), under their final names."""
    return [str(p.relative_to(out)) for p in out.glob("*/run-*/*.tfrecord")]


@pytest.mark.parametrize("mode", [
    ["--per_subset", "--subsets", "Pile-CC,ArXiv"],
    ["--stage_module", "split_helpers", "--filters", "split_shelf", "--split_by", "shelf"],
], ids=["per_subset", "split_by"])
def test_a_signal_removes_what_the_run_wrote_in_every_part_of_its_output(tmp_path, mode):
    """A --per_subset or --split_by run writes an output per subset or bucket: SIGTERM while their shards are
    being written removes each one's run directory and the parts left empty, not only OUT's."""
    import time

    from corpus_helpers import pile_line, write_lines

    for f in range(2):
        write_lines(str(tmp_path / "in" / f"{f:02d}.jsonl.zst"),
                    [pile_line(f"text {f} {i} " + "some words here " * (3 + i % 7), ("Pile-CC", "ArXiv")[i % 2])
                     for i in range(3000)])
    out = tmp_path / "out"
    job = Job("--input", str(tmp_path / "in" / "*.jsonl.zst"), "--output_dir", str(out), "--tokenizer_model",
              MODEL, "--seq_len", "16", "--shard_size_mb", "0.002", *mode, *IN_MEMORY,
              env={"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])})
    deadline = time.monotonic() + 240
    while not (out.exists() and _part_shards(out)):  # the parts' shards are being written
        assert job.running(), job.output()[-3000:]
        assert time.monotonic() < deadline, "no part's shard was written"
    job.freeze()
    assert not list(out.glob("*/manifest.json")) and not (out / "mixture.json").exists(), "the parts were committed"
    os.kill(job.proc.pid, signal.SIGTERM)
    job.thaw()
    status = job.finish(timeout=120)
    output = job.output()
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert len(problem_lines(output)) == 1 and "Traceback" not in output, output[-5000:]
    assert _left(out) == [], sorted(str(p.relative_to(out)) for p in out.rglob("*"))
