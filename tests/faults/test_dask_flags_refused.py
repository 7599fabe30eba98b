"""DaskRunner's flags refused before the job, with one line naming the flag (exit 2), never a client's traceback.

What Beam's Dask client would fail on once the job has started: a port that is not a number, a
number of tasks below 1, a scheduler file that is not one, a tls:// address without Dask's TLS
settings, and an address where something other than a Dask scheduler answers (a plain TCP server:
with --dask_npartitions too, where the scheduler was not asked before). The servers are real
sockets on loopback; the commands run as a user runs them.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
from fault_helpers import MODEL, SAMPLE_TRAIN, command, problem_lines

from pipeline.beam.options import pipeline_options
from pipeline.core.options import UsageError

DASK = ["--runner", "DaskRunner"]


@pytest.mark.parametrize("flags, message", [
    (["--dask_client_address", "tcp://127.0.0.1:notaport"],
     r"^--dask_client_address tcp://127\.0\.0\.1:notaport: the port 'notaport' is not a port number$"),
    (["--dask_client_address", "127.0.0.1:99999"], r"^--dask_client_address 127\.0\.0\.1:99999: the port '99999'"),
    (["--dask_client_address", "http://127.0.0.1:8786"], r"^--dask_client_address http://127\.0\.0\.1:8786: http:// is "
                                                          r"not one of Dask's protocols \(tcp://, tls://"),
    (["--dask_client_address", "tcp://:8786"], r"^--dask_client_address tcp://:8786: no host"),
    (["--dask_npartitions", "-1"], r"^--dask_npartitions -1: must be at least 1$"),
    (["--dask_npartitions", "0"], r"^--dask_npartitions 0: must be at least 1$"),
    (["--dask_partition_size", "0"], r"^--dask_partition_size 0: must be at least 1$"),
])
def test_wrong_values_are_refused_naming_the_flag(flags, message):
    with pytest.raises(UsageError, match=message):
        pipeline_options(DASK + flags)


@pytest.mark.parametrize("content, message", [
    ('{"type": "Scheduler", "address": ', "not a Dask scheduler file"),
    ("[1, 2]", "not a Dask scheduler file"),
    ('{"type": "Scheduler"}', 'names no scheduler "address"'),
    ('{"address": "tcp://127.0.0.1:port"}', r"its address tcp://127\.0\.0\.1:port: the port 'port' is not"),
    (None, "No such file or directory"),
])
def test_a_scheduler_file_that_is_not_one_is_refused(tmp_path, content, message):
    path = tmp_path / "scheduler.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=rf"^--dask_scheduler_file {path}: .*{message}"):
        pipeline_options(DASK + ["--dask_scheduler_file", str(path)])


def test_a_scheduler_file_that_names_one_is_taken(tmp_path):
    path = tmp_path / "scheduler.json"
    path.write_text('{"type": "Scheduler", "address": "tcp://10.1.2.3:8786"}')
    from pipeline.beam.runners.dask.cluster import scheduler_address

    assert scheduler_address(pipeline_options(DASK + ["--dask_scheduler_file", str(path)])) == "tcp://10.1.2.3:8786"


@contextlib.contextmanager
def _server(behaviour: str):
    """A TCP server on loopback that is not a Dask scheduler: to each connection it answers as a web server
    ("http"), says nothing ("silent") or closes it ("closes")."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()
    held = []

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            with contextlib.suppress(OSError):
                if behaviour == "http":
                    conn.recv(1 << 16)
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nhello")
                elif behaviour == "closes":
                    conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        for conn in held:
            conn.close()


def _refused(tmp_path, *flags: str) -> str:
    """Run the job on Dask with `flags`; assert exit 2 with one line and nothing written; that line."""
    out = tmp_path / "out"
    proc = command("--input", SAMPLE_TRAIN, "--output_dir", str(out), "--tokenizer_model", MODEL, *DASK,
                   "--dask_connection_timeout", "5", *flags, timeout=240)
    lines = problem_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert not out.exists() or list(out.iterdir()) == []
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", ["http", "silent", "closes"])
@pytest.mark.parametrize("tasks", [[], ["--dask_npartitions", "2"]], ids=["asked", "npartitions"])
def test_an_address_where_no_scheduler_answers_is_one_line(tmp_path, behaviour, tasks):
    with _server(behaviour) as port:
        line = _refused(tmp_path, "--dask_client_address", f"tcp://127.0.0.1:{port}", *tasks)
    assert f"--dask_client_address tcp://127.0.0.1:{port}: " in line
    assert "not a Dask scheduler" in line or "no Dask scheduler answers" in line, line


@pytest.mark.slow
def test_a_tls_address_without_tls_settings_is_one_line(tmp_path):
    with _server("silent") as port:
        line = _refused(tmp_path, "--dask_client_address", f"tls://127.0.0.1:{port}")
    assert f"--dask_client_address tls://127.0.0.1:{port}: a tls:// scheduler, but Dask's TLS settings" in line


@pytest.mark.slow
def test_a_broken_scheduler_file_is_one_line(tmp_path):
    path = tmp_path / "scheduler.json"
    path.write_text('{"address": "tcp://127.0.0.1:87')
    assert f"--dask_scheduler_file {path}: not a Dask scheduler file" in _refused(
        tmp_path, "--dask_scheduler_file", str(path))
