"""Operator mistakes and a hostile environment end in one line that names the file, not a traceback.

Found before the job starts (exit status 2): an output path under a file, an output directory that
cannot be written, an S3 endpoint that cannot be reached. Found while it runs (exit status 1): a
full disk, naming the file being written. And a run, finished or failed, leaves nothing in the
system temp dir.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest
from fault_helpers import IN_MEMORY, MODEL, PROCESSES, REPO, command, command_env, problem_lines, small_corpus

pytestmark = pytest.mark.slow


def _job(inputs, out, *extra):
    return ["--input", str(inputs), "--output_dir", str(out), "--tokenizer_model", MODEL, "--seq_len", "32", *extra]


def test_an_output_path_under_a_file(tmp_path):
    (tmp_path / "a-file").write_text("x")
    proc = command(*_job(small_corpus(tmp_path / "in", files=1), tmp_path / "a-file" / "out"))
    assert proc.returncode == 2
    (line,) = problem_lines(proc.stderr)
    assert f"--output_dir {tmp_path}/a-file/out: {tmp_path}/a-file is a file, not a directory" in line


def test_an_output_directory_that_cannot_be_written(tmp_path):
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    proc = command(*_job(small_corpus(tmp_path / "in", files=1), locked / "out"), as_a_user=True)
    assert proc.returncode == 2
    (line,) = problem_lines(proc.stderr)
    assert f"cannot write {locked}/out: Permission denied" in line


def test_an_s3_endpoint_that_cannot_be_reached(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "AKIDX",
           "AWS_SECRET_ACCESS_KEY": "never-shown", "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
           "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"}
    proc = command(*_job("s3://some-bucket/pile/*.jsonl.zst", tmp_path / "out"), env=env)
    assert proc.returncode == 2
    (line,) = problem_lines(proc.stderr)
    assert "--input s3://some-bucket/pile/*.jsonl.zst: cannot reach the store (EndpointConnectionError" in line
    assert f"http://127.0.0.1:{port}" in line and "AWS_ENDPOINT_URL_S3" in line
    assert "never-shown" not in proc.stderr


def test_a_full_disk_names_the_file(tmp_path):
    """The output directory is a 256 KiB tmpfs, mounted in a mount namespace of the job's own."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs mount namespaces (unshare -m) to mount a small tmpfs")
    out = tmp_path / "out"
    out.mkdir()
    job = _job(small_corpus(tmp_path / "in", files=2, docs=400), out, *IN_MEMORY)
    script = f'mount -t tmpfs -o size=256k tmpfs "{out}" && exec "$0" -m pipeline.run "$@"'
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, *job], cwd=REPO,
                          env=command_env(), capture_output=True, text=True, timeout=300)
    if "mount:" in proc.stderr and proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = problem_lines(proc.stderr)
    assert f"cannot write {out}/" in line and "No space left on device (the disk is full)" in line


@pytest.mark.parametrize("corrupt", [False, True])
def test_a_run_leaves_nothing_in_the_temp_dir(tmp_path, corrupt):
    """Beam's DirectRunner leaves temporary folders of its own; a run of ours removes them all."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    inputs = small_corpus(tmp_path / "in", files=3)
    if corrupt:
        (tmp_path / "in" / "01.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd not a frame")
    proc = command(*_job(inputs, tmp_path / "out", *PROCESSES), env={"TMPDIR": str(temp)})
    assert proc.returncode == (1 if corrupt else 0), proc.stderr[-3000:]
    assert list(temp.iterdir()) == []
    if corrupt:  # worker processes print Beam's traceback themselves; the command still ends with one line
        errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0])
        assert f"{tmp_path}/in/01.jsonl.zst: not valid zstd data" in errors[0]
