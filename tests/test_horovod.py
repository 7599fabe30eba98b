"""Horovod for real: `horovodrun -np 2 --gloo` on CPU, training the tiny model on shards written by
the pipeline (`python -m pipeline.run`) from a corpus and a SentencePiece model made here.

Runs in the Horovod environment (.venv-hvd: tensorflow-cpu 2.15.1 + horovod 0.28.1, built by
scripts/setup_horovod_env.sh). In CI (CI=true) a missing environment is a failure, elsewhere a skip.

Four launches, all with a global batch of 4: A trains 10 steps on 2 processes uninterrupted
(checkpoint at 6 and 10); B stops after step 6 on 2 processes; B' resumes B to step 10 on 2
processes; C resumes a copy of B's checkpoint at step 6 on 1 process (an elastic resume: the reader's
global batches do not depend on the number of ranks). With 4 steps per epoch, step 6 is in the
middle of the second epoch, so the resumes cover an epoch boundary and a mid-epoch data position.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
HVD_VENV = Path(os.environ.get("HVD_VENV", REPO / ".venv-hvd"))
HOROVODRUN = HVD_VENV / "bin" / "horovodrun"
HVD_PYTHON = HVD_VENV / "bin" / "python"

SEQ_LEN = 16
BATCH = 2  # per rank, on 2 ranks
GLOBAL_BATCH = 2 * BATCH
MAX_STEPS = 10
STOP_AT = 6

pytestmark = pytest.mark.slow


def _require_horovod_env() -> None:
    site = list(HVD_VENV.glob("lib/python3*/site-packages/horovod/tensorflow"))
    if HOROVODRUN.exists() and HVD_PYTHON.exists() and site:
        return
    reason = (f"Horovod environment not found at {HVD_VENV} (needs bin/horovodrun and horovod.tensorflow): "
              "build it with `bash scripts/setup_horovod_env.sh`")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


# -- data: corpus -> SentencePiece model -> pipeline shards -------------------------------------

_SUBJECTS = ["the cat", "a dog", "the bird", "my friend", "the teacher", "a farmer"]
_VERBS = ["sees", "likes", "finds", "follows", "helps", "calls"]
_OBJECTS = ["the ball", "a tree", "the river", "some bread", "the house", "a song"]


def _document(rng: random.Random) -> str:
    sentences = [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}."
                 for _ in range(rng.randint(2, 4))]
    return " ".join(s.capitalize() for s in sentences)


def _write_corpus(path: Path, docs: list[str]) -> None:
    import zstandard

    lines = [json.dumps({"text": d, "meta": {"pile_set_name": "Pile-CC"}}).encode() for d in docs]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(b"\n".join(lines) + b"\n"))


def _run_pipeline(corpus: Path, out: Path, model: Path, split: str) -> dict:
    cmd = [sys.executable, "-m", "pipeline.run", "--input", str(corpus), "--output_dir", str(out),
           "--tokenizer_model", str(model), "--seq_len", str(SEQ_LEN), "--split", split,
           "--shard_size_mb", "0.001", "--document_boundaries",
           "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, f"pipeline failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("hvd_data")
    rng = random.Random(7)
    train_docs = [_document(rng) for _ in range(6)]
    val_docs = [_document(rng) for _ in range(4)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([_document(rng) for _ in range(300)]), model_prefix=str(root / "sp"),
        vocab_size=48, model_type="bpe", bos_id=1, eos_id=2, pad_id=0, unk_id=3,
        character_coverage=1.0, minloglevel=2,
    )
    _write_corpus(root / "corpus" / "train.jsonl.zst", train_docs)
    _write_corpus(root / "corpus" / "val.jsonl.zst", val_docs)
    train = _run_pipeline(root / "corpus" / "train.jsonl.zst", root / "train", root / "sp.model", "train")
    val = _run_pipeline(root / "corpus" / "val.jsonl.zst", root / "val", root / "sp.model", "val")
    return {"root": root, "train": root / "train", "val": root / "val", "train_manifest": train,
            "val_manifest": val}


# -- the runs -----------------------------------------------------------------------------------


def _horovodrun(out: Path, extra: list[str], processes: int = 2) -> subprocess.CompletedProcess:
    cmd = [str(HOROVODRUN), "-np", str(processes), "-H", f"localhost:{processes}", "--gloo",
           "--network-interfaces", "lo", str(HVD_PYTHON), "-m", "trainers.train_horovod",
           "--train_data", str(out.parent / "data_train"), "--val_data", str(out.parent / "data_val"),
           "--output_dir", str(out), "--global_batch_size", str(GLOBAL_BATCH), "--max_steps", str(MAX_STEPS),
           "--learning_rate", "1e-2", "--warmup_steps", "2", "--dropout", "0", "--seed", "11",
           "--log_every", "1", "--eval_every", "5", "--eval_steps", "2", "--checkpoint_every", str(STOP_AT),
           "--deterministic", "--threads", "1", "--hvd_num_groups", "1", "--debug_dump", *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"horovodrun failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-8000:]}"
    return proc


@pytest.fixture(scope="module")
def runs(shards):
    _require_horovod_env()
    root = shards["root"] / "runs"
    root.mkdir()
    (root / "data_train").symlink_to(shards["train"])
    (root / "data_val").symlink_to(shards["val"])
    _horovodrun(root / "a", [])
    _horovodrun(root / "b", ["--stop_at", str(STOP_AT)])
    first_leg = {r: json.loads((root / "b" / "debug" / f"rank{r}.json").read_text()) for r in (0, 1)}
    shutil.copytree(root / "b" / "checkpoints", root / "c" / "checkpoints")
    _horovodrun(root / "b", [])
    _horovodrun(root / "c", [], processes=1)
    return {"root": root, "b_first_leg": first_leg}


def _summary(run: Path, rank: int) -> dict:
    return json.loads((run / "debug" / f"rank{rank}.json").read_text())


def _weights(run: Path, rank: int) -> dict:
    with np.load(run / "debug" / f"rank{rank}.npz") as f:
        return {k: f[k] for k in f.files}


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# -- what must hold -----------------------------------------------------------------------------


def test_pipeline_output_is_what_the_run_needs(shards):
    m = shards["train_manifest"]
    assert m["seq_len"] == SEQ_LEN and len(m["shards"]) >= 2
    assert {"segment_ids", "positions"} <= set(m["features"])
    steps = m["totals"]["records"] // (2 * BATCH)
    assert 3 <= steps <= STOP_AT - 1, f"{steps} steps per epoch: step {STOP_AT} must be inside epoch 2"


def test_two_real_processes_train_and_the_loss_falls(runs):
    a = runs["root"] / "a"
    log = (runs["root"] / "a.log").read_text()
    assert "[rank 0]" in log and "2 ranks" in log
    s0, s1 = _summary(a, 0), _summary(a, 1)
    assert (s0["rank"], s0["size"], s1["rank"], s1["size"]) == (0, 2, 1, 2)
    train = {r["step"]: r["loss"] for r in _metrics(a) if r["kind"] == "train"}
    assert sorted(train) == list(range(1, MAX_STEPS + 1))
    first, last = np.mean([train[1], train[2]]), np.mean([train[MAX_STEPS - 1], train[MAX_STEPS]])
    assert last < first - 0.3, train
    val = [r for r in _metrics(a) if r["kind"] == "val"]
    assert [r["step"] for r in val] == [5, MAX_STEPS]
    assert val[-1]["loss"] < val[0]["loss"] and all(np.isfinite(r["perplexity"]) for r in val)
    for name in ("learning_rate", "tokens_per_sec", "step_time_s", "input_wait_fraction", "grad_norm"):
        assert all(name in r for r in _metrics(a) if r["kind"] == "train")


def test_both_ranks_hold_identical_weights(runs):
    for run in ("a", "b"):
        path = runs["root"] / run
        w0, w1 = _weights(path, 0), _weights(path, 1)
        assert w0.keys() == w1.keys() and len(w0) > 10
        for k in w0:
            np.testing.assert_array_equal(w0[k], w1[k], err_msg=f"run {run} {k}")
        assert _summary(path, 0)["weights_sha256"] == _summary(path, 1)["weights_sha256"]


def test_only_rank_0_writes_checkpoints(runs):
    a = runs["root"] / "a"
    s0, s1 = _summary(a, 0), _summary(a, 1)
    assert s1["checkpoints"] == []
    assert [Path(p).name for p in s0["checkpoints"]] == [f"ckpt-{STOP_AT}", f"ckpt-{MAX_STEPS}"]
    files = sorted(p.name for p in (a / "checkpoints").iterdir())
    expected = ["checkpoint"] + sorted(f"ckpt-{n}.{ext}" for n in (STOP_AT, MAX_STEPS)
                                       for ext in ("index", "data-00000-of-00001"))
    assert files == expected  # nothing else (no second writer's files, no temporaries)
    assert not list((a / "checkpoints").glob("*tmp*"))
    # The logs and TensorBoard files are rank 0's only as well.
    assert len(list((a / "tensorboard").iterdir())) == 1


def test_resumed_run_matches_uninterrupted_run(runs):
    a, b = runs["root"] / "a", runs["root"] / "b"
    leg1 = runs["b_first_leg"][0]
    assert leg1["final_step"] == STOP_AT and leg1["start_step"] == 0
    s = _summary(b, 0)
    assert s["start_step"] == STOP_AT and s["restored_from"].endswith(f"ckpt-{STOP_AT}")
    assert s["final_step"] == MAX_STEPS
    spe = s["steps_per_epoch"]
    assert s["position"] == [MAX_STEPS, MAX_STEPS // spe, MAX_STEPS % spe]
    # Same losses step by step after the restart, and bit-identical final weights.
    la = {r["step"]: r["loss"] for r in _metrics(a) if r["kind"] == "train"}
    lb = {r["step"]: r["loss"] for r in _metrics(b) if r["kind"] == "train"}
    assert sorted(lb) == list(range(1, MAX_STEPS + 1))
    assert [lb[k] for k in range(1, MAX_STEPS + 1)] == [la[k] for k in range(1, MAX_STEPS + 1)]
    wa, wb = _weights(a, 0), _weights(b, 0)
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    assert _summary(a, 0)["weights_sha256"] == s["weights_sha256"]


def test_a_run_stopped_on_2_processes_continues_on_1_with_the_same_data(runs):
    a, c = runs["root"] / "a", runs["root"] / "c"
    s = _summary(c, 0)
    assert (s["size"], s["start_step"], s["final_step"]) == (1, STOP_AT, MAX_STEPS)
    assert s["restored_from"].endswith(f"ckpt-{STOP_AT}")
    a0, a1 = _summary(a, 0), _summary(a, 1)
    for step in range(STOP_AT + 1, MAX_STEPS + 1):
        # The one process's batch is the two processes' batches, rank 0's slice first: the same records.
        assert s["batches"][str(step)] == a0["batches"][str(step)] + a1["batches"][str(step)], step
        assert len(s["batches"][str(step)]) == GLOBAL_BATCH
    # Same global batch, same learning rate, same gradient (the global token mean): the same losses,
    # up to the order of float additions.
    la = {r["step"]: r["loss"] for r in _metrics(a) if r["kind"] == "train"}
    lc = {r["step"]: r["loss"] for r in _metrics(c) if r["kind"] == "train"}
    assert sorted(lc) == list(range(STOP_AT + 1, MAX_STEPS + 1))
    np.testing.assert_allclose([lc[k] for k in sorted(lc)], [la[k] for k in sorted(lc)], rtol=1e-4)
