"""The reader under tf.distribute: MirroredStrategy in one process, MultiWorkerMirroredStrategy with two
real worker processes on loopback (TF 2.21, and TF 2.15 from the Horovod environment); both entry
points give every global batch exactly as one process reads it, each replica its slice. `model.fit`
trains on the Keras form under MirroredStrategy (Keras 3) and MultiWorkerMirroredStrategy (Keras 2;
Keras 3 cannot fit under that strategy at all, see tests/distribute_worker.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from synthetic_output import record_ids, write_output

from pipeline import tfdata

pytestmark = pytest.mark.slow

HVD_PYTHON = os.path.join(os.environ.get("HVD_VENV", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), ".venv-hvd")), "bin", "python")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
COUNTS = [41, 37, 52, 30]
GLOBAL, STEPS, SEQ_LEN = 8, 6, 8


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("distribute"))
    write_output(d, COUNTS, seq_len=SEQ_LEN, padded_record=50)
    return d


def one_process(out: str) -> list[list[int]]:
    ds = tfdata.make_dataset(out, global_batch_size=GLOBAL, seed=13, shuffle_buffer=48, num_epochs=None)
    return [record_ids(b["inputs"].numpy()).tolist() for b in ds.take(STEPS)]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _env(extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    env.update(extra or {})
    return env


def _check(report: dict, expected: list[list[int]], workers: list[int], fit: bool = True) -> None:
    """Every step's global batch, put together from the replicas in order, is the one-process batch."""
    for entry in ("experimental", "function"):
        for step in range(STEPS):
            parts = [ids for w in workers for ids in report[w][entry]["ids"][step]]
            assert all(len(p) == GLOBAL // len(parts) for p in parts), (entry, step)
            assert [i for p in parts for i in p] == expected[step], (entry, step)
            # The all-reduce over every replica saw the whole global batch.
            assert report[workers[0]][entry]["tokens"][step] in (GLOBAL * SEQ_LEN, GLOBAL * SEQ_LEN - SEQ_LEN // 2)
    if fit:
        assert all(len(report[w]["fit_loss"]) == 1 and np.isfinite(report[w]["fit_loss"]).all() for w in workers)


def test_mirrored_strategy_both_entry_points(out, tmp_path):
    result = str(tmp_path / "mirrored.json")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "distribute_worker.py"), out, result, "mirrored",
                           str(GLOBAL), str(STEPS), "global"], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.load(open(result))
    assert report["replicas"] == 2
    _check({0: report}, one_process(out), [0])


def _two_workers(python: str, out: str, tmp_path, fit: str) -> dict:
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs, results = [], []
    for index in range(2):
        results.append(str(tmp_path / f"worker{index}.json"))
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [python, os.path.join(HERE, "distribute_worker.py"), out, results[-1], "multiworker",
             str(GLOBAL), str(STEPS), fit],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env({"TF_CONFIG": tf_config})))
    errors = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        errors.append(err)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(e[-3000:] for e in errors)
    reports = {i: json.load(open(results[i])) for i in range(2)}
    assert reports[0]["replicas"] == reports[1]["replicas"] == 2
    return reports


def test_multi_worker_mirrored_strategy_two_processes_both_entry_points(out, tmp_path):
    _check(_two_workers(sys.executable, out, tmp_path, "none"), one_process(out), [0, 1], fit=False)


def test_multi_worker_keras2_fit_on_tf_2_15(out, tmp_path):
    if not os.path.exists(HVD_PYTHON):
        reason = f"no TF 2.15 environment at {HVD_PYTHON} (scripts/setup_horovod_env.sh builds it)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    _check(_two_workers(HVD_PYTHON, out, tmp_path, "function"), one_process(out), [0, 1])
