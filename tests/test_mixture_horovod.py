"""A mixture under Horovod for real: `horovodrun -np 2 --gloo` on CPU (.venv-hvd: TF 2.15 + Horovod 0.28).

Two processes read a three-source mixture, each its slice of every global batch, train a tiny
model on it, then resume from the mixture's state mid-run; the global batches (all-gathered in
rank order) must be exactly the ones one process reads here (TF of the main environment). Then the
trainer itself (`trainers.train_horovod`) on two processes over a mixture: its global batches,
its per-source tokens in TensorBoard, its state beside the checkpoint and a resume on one process.
In CI (CI=true) a missing Horovod environment is a failure, elsewhere a skip (tests/test_horovod.py).
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


# -- the trainer: trainers/train_horovod.py over a mixture, two real processes -------------------------

TRAIN_SEQ, TRAIN_GLOBAL, TRAIN_STEPS, TRAIN_STOP, TRAIN_SEED, TRAIN_BUFFER = 16, 4, 10, 5, 11, 8


@pytest.fixture(scope="module")
def trainer_mixture(tmp_path_factory):
    """Three outputs of a learnable token stream and a mixture.json over them, re-weighted at step 7.

    The reader's windows are 2 steps (8 records, global batch 4): step 7 is inside one.
    """
    from test_trainers import SEQ, write_shards

    assert SEQ == TRAIN_SEQ
    root = tmp_path_factory.mktemp("hvd_trainer_mixture")
    for name, n, seed in (("a", 40, 1), ("b", 18, 4), ("c", 6, 6)):
        write_shards(root / name, n, 2, seed=seed, split="train")
    spec = {"format": "pile-mixture", "format_version": 1,
            "sources": [{"name": "a", "manifest": "a", "weight": 0.6}, {"name": "b", "manifest": "b", "weight": 0.3},
                        {"name": "c", "manifest": "c", "weight": 0.1}],
            "schedule": [{"step": 7, "weights": {"a": 0.2, "b": 0.3, "c": 0.5}}]}
    (root / "mixture.json").write_text(json.dumps(spec))
    return root / "mixture.json"


def _train_horovod(mixture, out, processes: int, extra=()) -> None:
    cmd = [str(HOROVODRUN), "-np", str(processes), "-H", f"localhost:{processes}", "--gloo",
           "--network-interfaces", "lo", str(HVD_PYTHON), "-m", "trainers.train_horovod",
           "--train_data", str(mixture), "--output_dir", str(out), "--global_batch_size", str(TRAIN_GLOBAL),
           "--max_steps", str(TRAIN_STEPS), "--learning_rate", "1e-2", "--warmup_steps", "2", "--dropout", "0",
           "--seed", str(TRAIN_SEED), "--shuffle_buffer", str(TRAIN_BUFFER), "--log_every", "1", "--eval_steps", "0",
           "--checkpoint_every", str(TRAIN_STOP), "--deterministic", "--threads", "1", "--hvd_num_groups", "1",
           "--debug_dump", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, f"horovodrun failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-8000:]}"


def _summary(out, rank: int) -> dict:
    return json.loads((out / "debug" / f"rank{rank}.json").read_text())


def test_train_horovod_over_a_mixture_on_two_processes_logs_tokens_per_source_and_resumes_on_one(
        trainer_mixture, tmp_path):
    """Two processes train on the mixture; a copy stopped at step 5 resumes on one process from its state."""
    from test_trainers import _mixture_scalars

    from trainers.loop import record_digests

    _require_horovod_env()
    full, part = tmp_path / "full", tmp_path / "part"
    _train_horovod(trainer_mixture, full, 2)
    _train_horovod(trainer_mixture, part, 2, ["--stop_at", str(TRAIN_STOP)])
    _train_horovod(trainer_mixture, part, 1)

    kw = dict(seed=TRAIN_SEED, shuffle_buffer=TRAIN_BUFFER)
    expected = [record_digests(b) for b in tfdata.make_dataset(
        str(trainer_mixture), global_batch_size=TRAIN_GLOBAL, num_steps=TRAIN_STEPS, **kw)]
    s0, s1 = _summary(full, 0), _summary(full, 1)
    assert (s0["rank"], s0["size"], s1["rank"], s1["size"]) == (0, 2, 1, 2)
    for step in range(1, TRAIN_STEPS + 1):  # rank 0's slice, then rank 1's: the reader's global batch
        assert s0["batches"][str(step)] + s1["batches"][str(step)] == expected[step - 1], step

    # Tokens seen per source (TensorBoard, rank 0 only): the mixture's counts after each step x seq_len.
    scalars = _mixture_scalars(full)
    assert set(scalars) == {f"mixture/{kind}/{n}" for kind in ("tokens", "epoch") for n in "abc"}
    for step in range(1, TRAIN_STEPS + 1):
        state = tfdata.mixture_state(str(trainer_mixture), TRAIN_GLOBAL, step, **kw)
        assert [scalars[f"mixture/tokens/{n}"][step] for n in "abc"] == [c * TRAIN_SEQ for c in state["counts"]]
        assert [scalars[f"mixture/epoch/{n}"][step] for n in "abc"] == state["epochs"]
        assert sum(state["counts"]) == TRAIN_GLOBAL * step
    assert scalars["mixture/epoch/c"][TRAIN_STEPS] >= 1  # the small source ran into its next epoch
    c_after = scalars["mixture/tokens/c"][TRAIN_STEPS] - scalars["mixture/tokens/c"][7]
    assert abs(c_after / TRAIN_SEQ - 0.5 * TRAIN_GLOBAL * (TRAIN_STEPS - 7)) < 1  # re-weighted at step 7

    # The state beside the checkpoint (rank 0's), and the resume on one process: the same batches and losses.
    saved = json.loads((part / "checkpoints" / f"mixture_state-{TRAIN_STOP}.json").read_text())
    assert saved == tfdata.mixture_state(str(trainer_mixture), TRAIN_GLOBAL, TRAIN_STOP, **kw)
    resumed = _summary(part, 0)
    assert (resumed["size"], resumed["start_step"], resumed["final_step"]) == (1, TRAIN_STOP, TRAIN_STEPS)
    assert resumed["restored_from"].endswith(f"ckpt-{TRAIN_STOP}")
    for step in range(TRAIN_STOP + 1, TRAIN_STEPS + 1):
        assert resumed["batches"][str(step)] == expected[step - 1], step
    losses_full = [s0["losses"][str(k)] for k in range(TRAIN_STOP + 1, TRAIN_STEPS + 1)]
    losses_resumed = [resumed["losses"][str(k)] for k in range(TRAIN_STOP + 1, TRAIN_STEPS + 1)]
    np.testing.assert_allclose(losses_resumed, losses_full, rtol=1e-4)
