"""The training loop, checkpoints, metrics and profiling (trainers/data_parallel.py and the modules it uses)
with the one-process backend, and the model-parallel trainer's shared parts (trainers/microbatch.py,
trainers/train_smp.py under its emulation), on this environment's TensorFlow (2.21 / Keras 3).

The shards are written here the pipeline's way (pipeline.records + pipeline.manifest), with document
boundaries and one padded record, from a token stream a tiny model learns in a few steps.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from manifest_shape import assert_job_shaped
from synthetic_output import tokenizer_entry

from pipeline import tfdata
from pipeline.format import manifest as manifest_lib
from pipeline.format import records
from pipeline.io import outputs
from trainers import config, loop
from trainers.checkpoint import Checkpointer, Progress
from trainers.config import TrainConfig
from trainers.data import data_signature, resume_problem
from trainers.data_parallel import train
from trainers.data_parallel_backends import LocalBackend, make_backend
from trainers.loss import masked_lm_loss
from trainers.microbatch import StepOutput, check_microbatches, emulated_step, split_microbatches
from trainers.model import build_model, model_config
from trainers.profiling import StepTimer

V, SEQ = 40, 16


def _stream(n_tokens: int, seed: int) -> np.ndarray:
    """A learnable stream: mostly t -> (3t + 1) mod V, documents separated by EOS (2)."""
    rng = np.random.default_rng(seed)
    out, t = [], 5
    for _ in range(n_tokens):
        out.append(t)
        t = 2 if rng.random() < 0.05 else (3 * t + 1) % (V - 3) + 3
    return np.array(out)


def write_shards(out_dir, n_records: int, n_shards: int, seed: int, split: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    stream = _stream(n_records * SEQ + 1, seed)
    dtype = records.token_dtype_for(V)
    shards, per = [], -(-n_records // n_shards)
    for s in range(n_shards):
        name = f"{split}-{s:05d}-of-{n_shards:05d}.tfrecord"
        path = os.path.join(out_dir, name)
        count = 0
        with tf.io.TFRecordWriter(path) as w:
            for r in range(s * per, min((s + 1) * per, n_records)):
                tokens = stream[r * SEQ: r * SEQ + SEQ + 1].copy()
                labels = tokens[1:]
                seg = np.cumsum(np.r_[1, (tokens[:-1][1:] == 2).astype(int)])  # new doc after EOS
                pos = np.concatenate([np.arange(k) for k in np.bincount(seg)[1:] if k])
                valid = None
                if r == n_records - 1:  # the job's one padded record: last 6 labels are padding
                    valid = SEQ - 6
                    tokens[valid + 1:] = 0
                    seg[valid:] = 0
                    pos[valid:] = 0
                del labels
                w.write(records.serialize_example(tokens, seg, pos, valid_labels=valid, dtype=dtype))
                count += 1
        data = open(path, "rb").read()
        shards.append({"path": name, "records": count, "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {
        "format": manifest_lib.FORMAT, "format_version": manifest_lib.FORMAT_VERSION, "split": split,
        "seq_len": SEQ, "features": records.feature_spec(SEQ, dtype, True),
        "tokenizer": tokenizer_entry(vocab_size=V),
        "shards": shards, "totals": {"records": n_records, "label_tokens": n_records * SEQ - 6,
                                     "bytes": sum(s["bytes"] for s in shards), "documents_kept": n_records,
                                     "lines": n_records},
    }
    outputs.write_manifest(str(out_dir), assert_job_shaped(manifest))
    return manifest


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainer_data")
    write_shards(root / "train", 60, 3, seed=1, split="train")
    write_shards(root / "val", 24, 2, seed=2, split="val")
    return root


def _cfg(data, out, **kw) -> TrainConfig:
    base = dict(train_data=str(data / "train"), val_data=str(data / "val"), output_dir=str(out),
                batch_size=4, max_steps=12, learning_rate=1e-2, warmup_steps=2, log_every=1,
                eval_steps=2, checkpoint_every=0, dropout=0.1, seed=3, deterministic=True, debug_dump=True)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    cfg = _cfg(data, out, eval_every=6, profile_start=4, profile_steps=2, checkpoint_every=5)
    return out, train(cfg, LocalBackend())


def _metrics(out) -> list[dict]:
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


@pytest.mark.slow
def test_loss_falls_and_validation_runs(full_run):
    out, summary = full_run
    losses = summary["losses"]
    assert sorted(losses) == list(range(1, 13))
    assert np.mean([losses[11], losses[12]]) < np.mean([losses[1], losses[2]]) - 0.5, losses
    assert [e["step"] for e in summary["evals"]] == [6, 12]
    assert summary["evals"][1]["loss"] < summary["evals"][0]["loss"]
    assert summary["evals"][0]["tokens"] == 2 * 4 * SEQ  # 2 batches of 4 unpadded records
    assert summary["steps_per_epoch"] == 15 and summary["position"] == [12, 0, 12]


@pytest.mark.slow
def test_metrics_tensorboard_and_profile_trace(full_run):
    out, _ = full_run
    train = [r for r in _metrics(out) if r["kind"] == "train"]
    for r in train:
        assert {"loss", "learning_rate", "tokens_per_sec", "step_time_s", "input_wait_fraction",
                "grad_norm", "epoch"} <= set(r)
        assert 0.0 <= r["input_wait_fraction"] <= 1.0 and r["tokens_per_sec"] > 0
    tags = set()
    for path in glob.glob(os.path.join(out, "tensorboard", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.add(value.tag)
                if value.tag == "train/loss":
                    assert value.metadata.plugin_data.plugin_name == "scalars"
    assert {"train/loss", "train/learning_rate", "train/tokens_per_sec", "train/step_time_s",
            "train/input_wait_fraction", "val/loss", "val/perplexity"} <= tags
    assert glob.glob(os.path.join(out, "profile", "plugins", "profile", "*", "*.xplane.pb"))
    assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == [
        "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index", "ckpt-12.data-00000-of-00001",
        "ckpt-12.index", "ckpt-5.data-00000-of-00001", "ckpt-5.index"]


@pytest.mark.slow
def test_stop_and_resume_is_exact(data, full_run, tmp_path):
    out_full, full = full_run
    first = train(_cfg(data, tmp_path, stop_at=7), LocalBackend())
    assert first["final_step"] == 7 and first["checkpoints"][-1].endswith("ckpt-7")
    resumed = train(_cfg(data, tmp_path), LocalBackend())
    assert resumed["start_step"] == 7 and resumed["restored_from"].endswith("ckpt-7")
    assert [resumed["losses"][k] for k in range(8, 13)] == [full["losses"][k] for k in range(8, 13)]
    assert resumed["weights_sha256"] == full["weights_sha256"]
    a = np.load(os.path.join(out_full, "debug", "rank0.npz"))
    b = np.load(os.path.join(tmp_path, "debug", "rank0.npz"))
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k])
    # Nothing left to do: a third start trains no step and changes nothing.
    again = train(_cfg(data, tmp_path, eval_steps=0), LocalBackend())
    assert again["start_step"] == again["final_step"] == 12 and again["weights_sha256"] == full["weights_sha256"]


@pytest.mark.slow
def test_resume_with_another_data_order_is_refused(data, tmp_path):
    train(_cfg(data, tmp_path, max_steps=2, eval_steps=0), LocalBackend())
    with pytest.raises(SystemExit, match="refusing to resume.*another data order.*batch_size"):
        train(_cfg(data, tmp_path, max_steps=4, eval_steps=0, batch_size=2), LocalBackend())


def test_resume_problem_rules():
    sig = {"shards": "x", "global_batch_size": 32, "seed": 1, "shuffle": True, "shuffle_buffer": None,
           "order": tfdata.ORDER}
    assert resume_problem(sig, dict(sig), 17) is None  # any number of ranks: not part of the order
    assert resume_problem(sig, {**sig, "global_batch_size": 64}, 0) is None  # epoch boundary: exact
    msg = resume_problem(sig, {**sig, "global_batch_size": 64}, 3)
    assert "global_batch_size" in msg and "--global_batch_size 32" in msg
    assert "seed" in resume_problem(sig, {**sig, "seed": 2}, 0)
    assert "order" in resume_problem(sig, {**sig, "order": "another"}, 0)
    assert "shards" in resume_problem(sig, {**sig, "shards": "y", "global_batch_size": 64}, 0)


def test_the_data_signature_does_not_depend_on_the_number_of_ranks(data, tmp_path):
    manifest = manifest_lib.load_manifest(str(data / "train"))
    fixed = _cfg(data, tmp_path, global_batch_size=8)
    assert data_signature(fixed, manifest, 1) == data_signature(fixed, manifest, 4)
    assert config.batch_sizes(fixed, 4) == (2, 8) and config.peak_learning_rate(fixed, 4) == fixed.learning_rate
    with pytest.raises(SystemExit, match="multiple"):
        config.batch_sizes(fixed, 3)
    per_rank = _cfg(data, tmp_path)  # --batch_size: the global batch grows with the ranks
    assert data_signature(per_rank, manifest, 1) != data_signature(per_rank, manifest, 2)
    assert config.peak_learning_rate(per_rank, 4) == 4 * per_rank.learning_rate


@pytest.mark.slow
def test_debug_dump_records_which_records_each_step_saw(data, tmp_path):
    summary = train(_cfg(data, tmp_path, max_steps=3, eval_steps=0, global_batch_size=4), LocalBackend())
    assert sorted(summary["batches"]) == [1, 2, 3] and all(len(d) == 4 for d in summary["batches"].values())
    ds = tfdata.make_dataset(str(data / "train"), global_batch_size=4, seed=3, features=())
    assert [loop.record_digests(b) for b in ds.take(3)] == [summary["batches"][k] for k in (1, 2, 3)]


def test_progress_rolls_over_epochs():
    p = Progress()
    for _ in range(7):
        p.advance(steps_per_epoch=3)
    assert p.position() == (7, 2, 1)


def test_only_the_chief_touches_the_checkpoint_directory(tmp_path):
    v = tf.Variable(1.0)
    worker = Checkpointer(str(tmp_path / "w"), is_chief=False, v=v)
    assert worker.save(1) is None and worker.latest() is None
    assert not (tmp_path / "w").exists()
    chief = Checkpointer(str(tmp_path / "c"), is_chief=True, variables=[v], v=v)
    assert chief.save(3).endswith("ckpt-3") and chief.latest().endswith("ckpt-3")
    broken = Checkpointer(str(tmp_path / "b"), is_chief=True, variables=[v, tf.Variable(2.0)], v=v)
    with pytest.raises(RuntimeError, match="not tracked"):
        broken.save(1)


def test_step_timer_measures_input_wait():
    now = [0.0]
    timer = StepTimer(tokens_per_step=100, clock=lambda: now[0])
    for _ in range(4):
        timer.start_fetch()
        now[0] += 0.25  # waiting for data
        timer.end_fetch()
        now[0] += 0.75  # computing
        timer.step_done()
    m = timer.window_metrics()
    assert m["step_time_s"] == pytest.approx(1.0)
    assert m["input_wait_fraction"] == pytest.approx(0.25)
    assert m["tokens_per_sec"] == pytest.approx(100.0)


def test_backends_without_their_library_say_what_to_do():
    with pytest.raises(SystemExit, match="SageMaker"):
        make_backend("smddp")
    b = make_backend("local")
    assert (b.rank(), b.size(), b.is_chief) == (0, 1, True)
    assert float(b.allreduce_sum(tf.constant(3.0))) == 3.0
    try:
        import horovod.tensorflow  # noqa: F401
    except ImportError:
        with pytest.raises(SystemExit, match="setup_horovod_env.sh"):
            make_backend("horovod")


# -- model parallelism: the parts that do not need the library -----------------------------------


def test_microbatch_split_and_step_outputs():
    with pytest.raises(ValueError, match="multiple of 3"):
        check_microbatches(8, 3)
    batch = {"inputs": tf.reshape(tf.range(24), [6, 4]), "seed": tf.constant([1, 2])}
    parts = split_microbatches(batch, 3, non_split=frozenset({"seed"}))
    assert len(parts) == 3 and parts[1]["inputs"].shape == (2, 4)
    np.testing.assert_array_equal(parts[2]["inputs"].numpy()[0], [16, 17, 18, 19])
    np.testing.assert_array_equal(parts[0]["seed"].numpy(), [1, 2])
    out = StepOutput([tf.constant([1.0, 2.0]), tf.constant([3.0, 6.0])])
    np.testing.assert_allclose(out.reduce_mean().numpy(), [2.0, 4.0])
    np.testing.assert_allclose(out.accumulate().numpy(), [2.0, 4.0])
    np.testing.assert_allclose(out.reduce_sum().numpy(), [4.0, 8.0])
    np.testing.assert_allclose(out.merge().numpy(), [1.0, 2.0, 3.0, 6.0])
    assert out.stack().shape == (2, 2)


def test_accumulated_microbatch_gradients_equal_the_full_batch_gradient():
    tf.keras.utils.set_random_seed(0)
    model = build_model(model_config("tiny", V, SEQ))
    x = tf.constant(np.random.default_rng(0).integers(3, V, (4, SEQ)), tf.int32)
    y = tf.roll(x, -1, axis=1)
    mask = tf.ones([4, SEQ])

    def grads_of(inputs, labels, loss_mask):
        loss = masked_lm_loss(model(inputs, training=True), labels, loss_mask)
        return tf.gradients(loss, model.trainable_variables), loss

    step = emulated_step(grads_of, microbatches=2)
    micro, loss = step(x, y, mask)
    with tf.GradientTape() as tape:
        full_loss = masked_lm_loss(model(x, training=True), y, mask)
    full = tape.gradient(full_loss, model.trainable_variables)
    assert float(loss.reduce_mean()) == pytest.approx(float(full_loss), rel=1e-5)
    for g_micro, g_full in zip(micro, full, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(g_micro.accumulate()).numpy(),
                                   tf.convert_to_tensor(g_full).numpy(), rtol=1e-4, atol=1e-6)


def test_microbatches_come_from_the_jobs_modelparallel_parameters(monkeypatch):
    from trainers import train_smp

    class Library:  # a library without num_microbatches()
        pass

    assert train_smp.num_microbatches(Library(), 1, '{"partitions": 2, "microbatches": 4}') == 4
    monkeypatch.setenv("SM_HP_MP_PARAMETERS", '{"microbatches": 8}')
    assert train_smp.num_microbatches(Library(), 1) == 8
    args = train_smp.build_parser().parse_args(["--train_data", "x", "--mp_parameters", "{}", "--model_dir", "/m"])
    assert args.mp_parameters == "{}"


def test_smp_script_fails_clearly_without_the_library(data, tmp_path):
    from trainers import train_smp

    with pytest.raises(SystemExit) as exc:
        train_smp.main(["--train_data", str(data / "train"), "--output_dir", str(tmp_path)])
    message = str(exc.value)
    assert "smdistributed.modelparallel" in message and "SageMaker" in message and "--smp_emulation" in message


@pytest.mark.slow
def test_smp_script_trains_and_resumes_exactly_under_the_emulation(data, tmp_path):
    from trainers import train_smp

    flags = ["--smp_emulation", "--microbatches", "2", "--train_data", str(data / "train"),
             "--val_data", str(data / "val"), "--batch_size", "4", "--max_steps", "8", "--learning_rate", "1e-2",
             "--warmup_steps", "2", "--log_every", "1", "--eval_steps", "2", "--checkpoint_every", "4",
             "--deterministic", "--seed", "5"]
    full = train_smp.main([*flags, "--output_dir", str(tmp_path / "full")])
    assert full["emulated"] and full["microbatches"] == 2 and full["dp_size"] == 1
    assert full["losses"][8] < full["losses"][1] - 0.3
    assert full["evals"] and np.isfinite(full["evals"][0]["loss"])
    assert len(full["checkpoints"]) == 2
    with pytest.raises(ValueError, match="multiple of 3"):
        train_smp.main([*flags, "--microbatches", "3", "--output_dir", str(tmp_path / "bad")])
    train_smp.main([*flags, "--output_dir", str(tmp_path / "resumed"), "--stop_at", "5"])
    resumed = train_smp.main([*flags, "--output_dir", str(tmp_path / "resumed")])
    assert resumed["start_step"] == 5
    assert [resumed["losses"][k] for k in (6, 7, 8)] == [full["losses"][k] for k in (6, 7, 8)]
    assert resumed["weights_sha256"] == full["weights_sha256"]


def test_the_flags_build_the_config_with_sagemakers_environment_as_defaults(monkeypatch, capsys):
    from trainers import train_horovod

    for name in ("SM_CHANNEL_TRAIN", "SM_CHANNEL_VAL", "SM_MODEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    parser = train_horovod.build_parser()
    cfg = config.config_from_args(parser.parse_args(["--train_data", "d", "--mixed_precision", "--shuffle", "0",
                                                     "--global_batch_size", "16", "--learning_rate", "1e-3"]))
    assert cfg == TrainConfig(train_data="d", output_dir="out/train", mixed_precision=True, shuffle=False,
                              global_batch_size=16, learning_rate=1e-3)
    assert cfg.resolved_checkpoint_dir == os.path.join("out/train", "checkpoints")
    monkeypatch.setenv("SM_CHANNEL_TRAIN", "/opt/ml/input/data/train")
    monkeypatch.setenv("SM_MODEL_DIR", "/opt/ml/model")
    on_sagemaker = config.config_from_args(parser.parse_args(["--model_dir", "s3://b/m", "--model", "small"]))
    assert (on_sagemaker.train_data, on_sagemaker.output_dir, on_sagemaker.model) == (
        "/opt/ml/input/data/train", "/opt/ml/model", "small")
    assert on_sagemaker.resolved_checkpoint_dir == "/opt/ml/checkpoints"
    assert on_sagemaker.resolved_tensorboard_dir == "/opt/ml/output/tensorboard"
    with pytest.raises(SystemExit) as exc:
        config.config_from_args(parser.parse_args(["--shuffle", "maybe"]))
    assert exc.value.code == 2 and "--shuffle: expected true or false" in capsys.readouterr().err


# -- a mixture as --train_data ---------------------------------------------------------------------------

MIX_BUFFER = 8  # records per window of the mixture's order: 2 steps of 4 (step 6 starts a window)


@pytest.fixture(scope="module")
def mixture_data(tmp_path_factory):
    """Two outputs and a mixture.json over them, re-weighted at step 6."""
    root = tmp_path_factory.mktemp("trainer_mixture")
    write_shards(root / "a", 40, 2, seed=1, split="train")
    write_shards(root / "b", 18, 2, seed=4, split="train")
    spec = {"format": "pile-mixture", "format_version": 1,
            "sources": [{"name": "a", "manifest": "a", "weight": 0.7}, {"name": "b", "manifest": "b", "weight": 0.3}],
            "schedule": [{"step": 6, "weights": {"a": 0.2, "b": 0.8}}]}
    (root / "mixture.json").write_text(json.dumps(spec))
    return root


def _mix_cfg(root, out, **kw) -> TrainConfig:
    return _cfg(root, out, train_data=str(root / "mixture.json"), val_data=None, eval_steps=0,
                shuffle_buffer=MIX_BUFFER, checkpoint_every=5, **kw)


def _mixture_scalars(out) -> dict:
    """{tag: {step: value}} of the mixture/ scalars in the run's event files."""
    found: dict = {}
    for path in glob.glob(os.path.join(out, "tensorboard", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag.startswith("mixture/"):
                    number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                    found.setdefault(value.tag, {})[event.step] = number
    return found


@pytest.mark.slow
def test_a_mixture_trains_resumes_exactly_and_logs_tokens_per_source(mixture_data, tmp_path):
    full = train(_mix_cfg(mixture_data, tmp_path / "full"), LocalBackend())
    assert sorted(full["losses"]) == list(range(1, 13)) and all(np.isfinite(list(full["losses"].values())))
    first = train(_mix_cfg(mixture_data, tmp_path / "resumed", stop_at=7), LocalBackend())
    assert first["final_step"] == 7
    ckpts = tmp_path / "resumed" / "checkpoints"
    saved = json.loads((ckpts / "mixture_state-7.json").read_text())
    assert saved["step"] == 7 and saved["sources"] == ["a", "b"]
    assert saved == tfdata.mixture_state(str(mixture_data / "mixture.json"), 4, 7, seed=3,
                                         shuffle_buffer=MIX_BUFFER)
    resumed = train(_mix_cfg(mixture_data, tmp_path / "resumed"), LocalBackend())
    assert resumed["start_step"] == 7 and resumed["restored_from"].endswith("ckpt-7")
    assert [resumed["losses"][k] for k in range(8, 13)] == [full["losses"][k] for k in range(8, 13)]
    assert resumed["weights_sha256"] == full["weights_sha256"]
    assert resumed["batches"] == {k: full["batches"][k] for k in range(8, 13)}
    # A state beside every checkpoint kept, none beside those CheckpointManager removed.
    states = sorted(p.name for p in ckpts.glob("mixture_state-*.json"))
    assert states == ["mixture_state-10.json", "mixture_state-12.json", "mixture_state-7.json"]

    scalars = _mixture_scalars(tmp_path / "full")
    assert set(scalars) == {"mixture/tokens/a", "mixture/tokens/b", "mixture/epoch/a", "mixture/epoch/b"}
    assert sorted(scalars["mixture/tokens/a"]) == list(range(1, 13))
    for step in (1, 6, 12):
        state = tfdata.mixture_state(str(mixture_data / "mixture.json"), 4, step, seed=3, shuffle_buffer=MIX_BUFFER)
        assert [scalars[f"mixture/tokens/{n}"][step] for n in "ab"] == [c * SEQ for c in state["counts"]]
        assert [scalars[f"mixture/epoch/{n}"][step] for n in "ab"] == state["epochs"]
        assert sum(state["counts"]) == 4 * step
    # The re-weighting at step 6 shows in the tokens: b takes 0.8 of the samples after it.
    b_after = scalars["mixture/tokens/b"][12] - scalars["mixture/tokens/b"][6]
    assert abs(b_after / SEQ - 0.8 * 24) <= 1


@pytest.mark.slow
def test_a_mixture_whose_past_weights_changed_is_refused_on_resume(mixture_data, tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    for name in ("a", "b"):
        os.symlink(mixture_data / name, root / name)
    spec = json.loads((mixture_data / "mixture.json").read_text())
    (root / "mixture.json").write_text(json.dumps(spec))
    train(_mix_cfg(root, tmp_path / "out", stop_at=8), LocalBackend())
    spec["schedule"][0]["weights"] = {"a": 0.5, "b": 0.5}  # step 6 is in the past at step 8
    (root / "mixture.json").write_text(json.dumps(spec))
    with pytest.raises(tfdata.MixtureError, match="schedule"):
        train(_mix_cfg(root, tmp_path / "out"), LocalBackend())


@pytest.mark.slow
def test_the_smp_trainer_takes_a_mixture_and_resumes_exactly(mixture_data, tmp_path):
    from trainers import train_smp

    flags = ["--smp_emulation", "--microbatches", "2", "--train_data", str(mixture_data / "mixture.json"),
             "--batch_size", "4", "--max_steps", "8", "--learning_rate", "1e-2", "--warmup_steps", "2",
             "--log_every", "1", "--eval_steps", "0", "--checkpoint_every", "4", "--deterministic", "--seed", "5",
             "--shuffle_buffer", str(MIX_BUFFER)]
    full = train_smp.main([*flags, "--output_dir", str(tmp_path / "full")])
    train_smp.main([*flags, "--output_dir", str(tmp_path / "resumed"), "--stop_at", "5"])
    resumed = train_smp.main([*flags, "--output_dir", str(tmp_path / "resumed")])
    assert resumed["start_step"] == 5
    assert [resumed["losses"][k] for k in (6, 7, 8)] == [full["losses"][k] for k in (6, 7, 8)]
    assert resumed["weights_sha256"] == full["weights_sha256"]
    assert "mixture/tokens/b" in _mixture_scalars(tmp_path / "full")
