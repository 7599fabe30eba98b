"""A mixture under Horovod for real: `horovodrun -np 2 --gloo` on CPU (.venv-hvd: TF 2.15 + Horovod 0.28).

Two processes read a three-source mixture, each its slice of every global batch, train a tiny
model on it, then resume from the mixture's state mid-run; the global batches (all-gathered in
rank order) must be exactly the ones one process reads here (TF of the main environment). In CI
(CI=true) a missing Horovod environment is a failure, elsewhere a skip (tests/test_horovod.py).
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
from synthetic_output import record_ids, write_output
from test_horovod import HOROVODRUN, HVD_PYTHON, REPO, _require_horovod_env

from pipeline import tfdata

pytestmark = pytest.mark.slow
SIZES = {"big": [60, 45], "small": [7], "mid": [30, 26]}
GLOBAL, STEPS, RESUME_AT, SEED, WINDOW = 8, 14, 9, 5, 96


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("hvd_mixture")
    sources = []
    for i, (name, shards) in enumerate(SIZES.items()):
        write_output(str(root / name), shards, seq_len=8, first_id=i * 10_000)
        sources.append({"name": name, "manifest": name, "weight": [0.5, 0.3, 0.2][i]})
    path = root / "mixture.json"
    path.write_text(json.dumps({"format": "pile-mixture", "format_version": 1, "sources": sources}))
    return path


def test_two_horovod_processes_read_the_global_batches_of_one(mixture, tmp_path):
    _require_horovod_env()
    cmd = [str(HOROVODRUN), "-np", "2", "-H", "localhost:2", "--gloo", "--network-interfaces", "lo",
           str(HVD_PYTHON), os.path.join(REPO, "tests", "hvd_mixture_worker.py"), str(mixture), str(tmp_path),
           str(GLOBAL), str(STEPS), str(RESUME_AT)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["size"]) for r in reports] == [(0, 2), (1, 2)]
    expected = [record_ids(b["inputs"].numpy()).tolist() for b in tfdata.make_dataset(
        str(mixture), global_batch_size=GLOBAL, seed=SEED, shuffle_buffer=WINDOW, num_steps=STEPS)]
    for r in reports:
        assert r["batches"] == expected
        assert r["resumed"] == expected[RESUME_AT:]
        assert len(r["losses"]) == STEPS and np.isfinite(r["losses"]).all()
    assert reports[0]["losses"] == reports[1]["losses"]  # all-reduced: the same on both ranks
