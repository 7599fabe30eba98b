"""The data-parallel training loop shared by Horovod and SageMaker's data-parallel library.

Horovod's six steps, each marked `# Horovod (step N)` where it happens:
  1. init (the backend's constructor: `hvd.init()` / `sdp.init()`);
  2. pin one GPU per local rank (`backend.pin_gpu()`);
  3. scale the learning rate by the number of workers (`--scale_lr`, on by default);
  4. wrap the tape in `DistributedGradientTape` (`backend.wrap_tape`);
  5. broadcast the variables from rank 0. Horovod's example does it after the first step because a
     Keras optimizer creates its slots inside the first `apply_gradients`; ours (trainers/optim.py)
     are built before step 1, so the broadcast runs *before* the first step, which also makes a
     checkpoint restored on rank 0 alone reach every rank before any gradient is computed;
  6. checkpoint on rank 0 only (`Checkpointer`), and log on rank 0 only (`MetricsLogger`).

Data: the reader (`pipeline.tfdata.make_dataset`) with `dp_rank = backend.rank()`, `dp_size =
backend.size()`, each rank taking its slice of every global batch. Every rank gets the same number
of batches (no Horovod deadlock), and the data position (epoch, step in epoch) is part of every
checkpoint, so a resumed run consumes exactly the batches an uninterrupted run would have (it
passes them back as `epoch`/`start_step`). The reader's global batches do not depend on the number
of ranks, so with `--global_batch_size` a run resumes exactly on any number of ranks that divides
it (a spot job stopped on 16 GPUs continues on 8).

Loss: token-level cross-entropy over label positions with `loss_mask == 1` (padding excluded),
normalized by the number of real tokens *across all ranks*, so the averaged gradient is the gradient
of the global token mean whatever the padding on each rank.

Checkpoint = model + optimizer (moments, iteration count) + progress (global step, epoch, step in
epoch, and a signature of everything that fixes the data order: the shards, the global batch size,
seed, shuffling, window and the reader's order). Resuming with a different data order is refused,
except a different global batch size at an epoch boundary (a new epoch starts whole). The step
loop itself (logging, evaluation and checkpoint cadence) is trainers/loop.py, shared with the
model-parallel trainer.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import posixpath

import numpy as np
import tensorflow as tf

from pipeline.core.options import parse_bool
from pipeline.format import manifest as manifest_lib
from trainers import loop
from trainers.model import PRESETS, ModelConfig, build_model, model_config
from trainers.optim import AdamW, WarmupCosine
from trainers.profiling import MetricsLogger, ProfileWindow

LOG = logging.getLogger("trainers")


# ----------------------------------------------------------------------------------------------
# Loss
# ----------------------------------------------------------------------------------------------


def token_losses(logits, labels):
    """Cross-entropy per label position: logits [B, L, V] float32, labels [B, L] -> [B, L]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def masked_lm_loss(logits, labels, loss_mask, denominator=None):
    """sum(ce * loss_mask) / denominator; the denominator defaults to sum(loss_mask) (at least 1).

    Args:
        logits: float32 [B, L, V].
        labels: int32 [B, L].
        loss_mask: float32 [B, L], 0 on padding.
        denominator: optional scalar, e.g. the mean number of real tokens per rank, which turns the
            ranks' averaged gradients into the gradient of the global token mean.

    Returns:
        Scalar float32 loss.
    """
    mask = tf.cast(loss_mask, tf.float32)
    total = tf.reduce_sum(token_losses(logits, labels) * mask)
    if denominator is None:
        denominator = tf.reduce_sum(mask)
    return total / tf.maximum(tf.cast(denominator, tf.float32), 1.0)


def model_inputs(batch: dict, use_document_boundaries: bool) -> dict:
    """Keyword arguments for the model from a reader batch."""
    kwargs = {}
    if use_document_boundaries:
        if "segment_ids" in batch:
            kwargs["segment_ids"] = batch["segment_ids"]
        if "positions" in batch:
            kwargs["positions"] = batch["positions"]
    return kwargs


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


def _env(name: str, default=None):
    """SageMaker's environment (SM_CHANNEL_TRAIN, SM_MODEL_DIR, ...) gives defaults to the flags."""
    return os.environ.get(name) or default


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; `config_from_args` builds it from the command line."""

    train_data: str  # pipeline output dir (or its manifest.json): local, EFS mount or s3://
    output_dir: str  # metrics.jsonl, tensorboard/, model_config.json, profile traces
    val_data: str | None = None  # validation output of the pipeline (--split val)
    checkpoint_dir: str | None = None  # default: <output_dir>/checkpoints
    tensorboard_dir: str | None = None  # default: <output_dir>/tensorboard
    model: str = "tiny"  # preset in trainers.model.PRESETS
    d_model: int | None = None  # preset overrides
    n_layers: int | None = None
    n_heads: int | None = None
    d_ff: int | None = None
    max_seq_len: int | None = None  # default: the manifest's seq_len
    dropout: float = 0.0
    tie_embeddings: bool = True
    mixed_precision: bool = False  # bfloat16 compute
    use_document_boundaries: bool = True  # use segment_ids/positions when the shards have them
    batch_size: int = 8  # per rank (ignored with global_batch_size)
    global_batch_size: int | None = None  # per step over all ranks: fixes the data order for any number of ranks
    max_steps: int = 1000  # length of the run (and of the learning-rate schedule)
    stop_at: int | None = None  # end this process after this global step (resume later); schedule unchanged
    learning_rate: float = 3e-4  # for one worker; times the number of workers with scale_lr
    scale_lr: bool = True
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta_1: float = 0.9
    beta_2: float = 0.95
    clip_norm: float = 1.0
    seed: int = 1234  # model init, data order (with epoch and rank), dropout (with step and rank)
    shuffle: bool = True
    shuffle_buffer: int | None = None  # reader defaults when None
    num_parallel_reads: int | None = None
    verify_data: bool = False  # sha256 of every shard before step 0
    log_every: int = 10
    eval_every: int = 0  # 0: only after the last step
    eval_steps: int = 50  # batches per rank per evaluation
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    profile_start: int | None = None  # capture a tf.profiler trace from this step ...
    profile_steps: int = 3  # ... for this many steps (rank 0)
    deterministic: bool = False  # tf.config.experimental.enable_op_determinism()
    threads: int = 0  # intra/inter-op threads (0: TensorFlow's default)
    debug_dump: bool = False  # every rank writes <output_dir>/debug/rank<r>.{npz,json} at the end

    def __post_init__(self):
        if self.model not in PRESETS:
            raise ValueError(f"--model {self.model!r}: choose one of {sorted(PRESETS)}")
        if self.batch_size < 1 or self.max_steps < 1 or (self.global_batch_size or 1) < 1:
            raise ValueError("--batch_size, --global_batch_size and --max_steps must be >= 1")
        if self.log_every < 1 or self.eval_steps < 0 or self.checkpoint_every < 0 or self.eval_every < 0:
            raise ValueError("--log_every must be >= 1; --eval_steps/--eval_every/--checkpoint_every >= 0")
        if self.learning_rate <= 0:
            raise ValueError("--learning_rate must be positive")

    @property
    def resolved_checkpoint_dir(self) -> str:
        """Where checkpoints go."""
        return self.checkpoint_dir or os.path.join(self.output_dir, "checkpoints")

    @property
    def resolved_tensorboard_dir(self) -> str:
        """Where TensorBoard event files go."""
        return self.tensorboard_dir or os.path.join(self.output_dir, "tensorboard")


def add_train_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of every trainer (SageMaker passes hyperparameters as these flags)."""
    d = TrainConfig(train_data="", output_dir="")
    p.add_argument("--train_data", default=_env("SM_CHANNEL_TRAIN"),
                   help="pipeline output directory (manifest.json inside); default $SM_CHANNEL_TRAIN")
    p.add_argument("--val_data", default=_env("SM_CHANNEL_VAL"),
                   help="validation output of the pipeline; default $SM_CHANNEL_VAL")
    p.add_argument("--output_dir", default=_env("SM_MODEL_DIR", "out/train"),
                   help="metrics, TensorBoard, configs; default $SM_MODEL_DIR or out/train")
    p.add_argument("--model_dir", default=None, help=argparse.SUPPRESS)  # SageMaker's TF estimator may pass it
    p.add_argument("--checkpoint_dir", default="/opt/ml/checkpoints" if _env("SM_MODEL_DIR") else None,
                   help="default <output_dir>/checkpoints (/opt/ml/checkpoints on SageMaker)")
    p.add_argument("--tensorboard_dir",
                   default="/opt/ml/output/tensorboard" if _env("SM_MODEL_DIR") else None,
                   help="default <output_dir>/tensorboard (/opt/ml/output/tensorboard on SageMaker)")
    p.add_argument("--model", default=d.model, choices=sorted(PRESETS))
    for name in ("d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
        p.add_argument(f"--{name}", type=int, default=None, help="override the preset")
    p.add_argument("--dropout", type=float, default=d.dropout)
    p.add_argument("--tie_embeddings", type=parse_bool, default=d.tie_embeddings)
    p.add_argument("--mixed_precision", type=parse_bool, nargs="?", const=True, default=d.mixed_precision,
                   help="bfloat16 compute, float32 weights")
    p.add_argument("--use_document_boundaries", type=parse_bool, default=d.use_document_boundaries,
                   help="mask attention to each packed document and restart positions (when the "
                        "shards were written with --document_boundaries)")
    p.add_argument("--batch_size", type=int, default=d.batch_size, help="per rank (without --global_batch_size)")
    p.add_argument("--global_batch_size", type=int, default=None,
                   help="records per step over all ranks (each rank takes 1/size of it): the data order is "
                        "then the same for any number of ranks, and a run resumes on another number of "
                        "ranks that divides it; --learning_rate is then for this batch (not scaled)")
    p.add_argument("--max_steps", type=int, default=d.max_steps,
                   help="total steps of the run; the learning-rate schedule spans them")
    p.add_argument("--stop_at", type=int, default=None,
                   help="stop this process after this global step and checkpoint (a time-limited job); "
                        "a later run with the same flags resumes")
    p.add_argument("--learning_rate", type=float, default=d.learning_rate,
                   help="for one worker (for the whole batch with --global_batch_size)")
    p.add_argument("--scale_lr", type=parse_bool, default=d.scale_lr,
                   help="multiply the learning rate by the number of workers (Horovod's recipe, for a "
                        "global batch that grows with them; not with --global_batch_size)")
    p.add_argument("--warmup_steps", type=int, default=d.warmup_steps)
    p.add_argument("--min_lr_ratio", type=float, default=d.min_lr_ratio)
    p.add_argument("--weight_decay", type=float, default=d.weight_decay)
    p.add_argument("--beta_1", type=float, default=d.beta_1)
    p.add_argument("--beta_2", type=float, default=d.beta_2)
    p.add_argument("--clip_norm", type=float, default=d.clip_norm)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--shuffle", type=parse_bool, default=d.shuffle)
    p.add_argument("--shuffle_buffer", type=int, default=None, help="reader's records per shuffle window")
    p.add_argument("--num_parallel_reads", type=int, default=None, help="reader's concurrent windows")
    p.add_argument("--verify_data", type=parse_bool, nargs="?", const=True, default=d.verify_data)
    p.add_argument("--log_every", type=int, default=d.log_every)
    p.add_argument("--eval_every", type=int, default=d.eval_every, help="0: after the last step only")
    p.add_argument("--eval_steps", type=int, default=d.eval_steps, help="batches per rank")
    p.add_argument("--checkpoint_every", type=int, default=d.checkpoint_every, help="0: at the end only")
    p.add_argument("--keep_checkpoints", type=int, default=d.keep_checkpoints)
    p.add_argument("--profile_start", type=int, default=None,
                   help="capture a tf.profiler trace from this step (rank 0)")
    p.add_argument("--profile_steps", type=int, default=d.profile_steps)
    p.add_argument("--deterministic", type=parse_bool, nargs="?", const=True, default=d.deterministic)
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--debug_dump", type=parse_bool, nargs="?", const=True, default=d.debug_dump,
                   help="every rank writes its final weights and a summary to <output_dir>/debug")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """A TrainConfig from parsed flags (unknown attributes of `args` are ignored)."""
    if not args.train_data:
        raise SystemExit("--train_data is required (or $SM_CHANNEL_TRAIN): the pipeline's output directory")
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in vars(args).items() if k in names})


def resolve_model_config(cfg: TrainConfig, manifest: dict) -> ModelConfig:
    """The model's config from the run's flags and the manifest (vocabulary, sequence length)."""
    seq_len = int(manifest["seq_len"])
    max_seq_len = cfg.max_seq_len or seq_len
    if max_seq_len < seq_len:
        raise ValueError(f"--max_seq_len {max_seq_len} is shorter than the shards' seq_len {seq_len}")
    return model_config(
        cfg.model, vocab_size=int(manifest["tokenizer"]["vocab_size"]), max_seq_len=max_seq_len,
        d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads, d_ff=cfg.d_ff,
        dropout=cfg.dropout, tie_embeddings=cfg.tie_embeddings, mixed_precision=cfg.mixed_precision,
    )


def reader_kwargs(cfg: TrainConfig) -> dict:
    """Reader options the run sets (omitted: the reader's defaults)."""
    out = {}
    if cfg.shuffle_buffer is not None:
        out["shuffle_buffer"] = cfg.shuffle_buffer
    if cfg.num_parallel_reads is not None:
        out["num_parallel_reads"] = cfg.num_parallel_reads
    return out


def batch_sizes(cfg: TrainConfig, dp_size: int) -> tuple[int, int]:
    """(records per rank, records per global step) for `dp_size` data-parallel ranks."""
    if cfg.global_batch_size is None:
        return cfg.batch_size, cfg.batch_size * dp_size
    if cfg.global_batch_size % dp_size:
        raise SystemExit(
            f"--global_batch_size {cfg.global_batch_size} is not a multiple of the {dp_size} data-parallel "
            "ranks; run on a number of ranks that divides it"
        )
    return cfg.global_batch_size // dp_size, cfg.global_batch_size


def peak_learning_rate(cfg: TrainConfig, dp_size: int) -> float:
    """The schedule's peak: scaled by the number of workers only when the global batch grows with them."""
    return cfg.learning_rate * (dp_size if cfg.scale_lr and cfg.global_batch_size is None else 1)


def data_signature(cfg: TrainConfig, manifest: dict, dp_size: int) -> dict:
    """Everything that fixes which records global step k holds (not the number of ranks)."""
    from pipeline import tfdata

    # By name, not path: a rerun of the same job writes the same shards into another run directory.
    listed = [(posixpath.basename(s["path"]), s["records"], s.get("sha256")) for s in manifest["shards"]]
    shards = hashlib.sha256(json.dumps(listed).encode()).hexdigest()
    return {
        "shards": shards,
        "global_batch_size": batch_sizes(cfg, dp_size)[1],
        "seed": cfg.seed,
        "shuffle": cfg.shuffle,
        "shuffle_buffer": cfg.shuffle_buffer,
        "order": tfdata.ORDER,
    }


def resume_problem(saved: dict, current: dict, step_in_epoch: int) -> str | None:
    """Why resuming `saved` as `current` would not be exact, or None when it is.

    The number of ranks is not part of the order. A different global batch size is fine at an epoch
    boundary (step_in_epoch == 0): the new epoch is planned whole for it.
    """
    diff = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    if not diff or (diff == ["global_batch_size"] and step_in_epoch == 0):
        return None
    details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {current.get(k)!r}" for k in diff)
    hint = ""
    if "global_batch_size" in diff:
        hint = (" To resume on another number of workers, keep the global batch: pass --global_batch_size "
                f"{saved.get('global_batch_size')} (it must be a multiple of the number of workers).")
    return f"the checkpoint was written with another data order ({details}).{hint}"


# ----------------------------------------------------------------------------------------------
# State and checkpoints
# ----------------------------------------------------------------------------------------------


class Progress(tf.Module):
    """Where training stands: global step and the data position (epoch, step within it)."""

    def __init__(self):
        super().__init__(name="progress")
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_in_epoch")
        self.signature = tf.Variable("", dtype=tf.string, trainable=False, name="data_signature")
        self.resume_error = tf.Variable(0, dtype=tf.int64, trainable=False, name="resume_error")

    @property
    def numeric(self) -> list[tf.Variable]:
        """The variables rank 0 broadcasts (strings cannot be all-reduced)."""
        return [self.global_step, self.epoch, self.step_in_epoch]

    def advance(self, steps_per_epoch: int) -> None:
        """One step done: move the data position, rolling over at the end of the epoch."""
        self.global_step.assign_add(1)
        k = int(self.step_in_epoch.numpy()) + 1
        if k >= steps_per_epoch:
            self.epoch.assign_add(1)
            k = 0
        self.step_in_epoch.assign(k)

    def position(self) -> tuple[int, int, int]:
        """(global step, epoch, step in epoch)."""
        return int(self.global_step.numpy()), int(self.epoch.numpy()), int(self.step_in_epoch.numpy())


class Checkpointer:
    """tf.train.Checkpoint of model + optimizer + progress; files are touched on rank 0 only."""

    def __init__(self, directory: str, is_chief: bool, max_to_keep: int = 3, *, variables=None, **trackables):
        self.directory = directory
        self.is_chief = is_chief
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self.manager = None
        self.saved: list[str] = []
        # Variables the checkpoint must hold; checked after the first save (a layer kept in a
        # container that tf.train.Checkpoint cannot see would otherwise be silently left out).
        self._expected = None if variables is None else len({id(v) for v in variables})
        if is_chief:  # Horovod (step 6): only rank 0 writes checkpoints
            self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=max_to_keep)

    def latest(self) -> str | None:
        """The newest checkpoint's prefix (rank 0), else None."""
        return self.manager.latest_checkpoint if self.manager is not None else None

    def restore(self, path: str) -> None:
        """Load `path` into the (already built) model, optimizer and progress."""
        self.checkpoint.restore(path).assert_existing_objects_matched()

    def save(self, step: int) -> str | None:
        """Write checkpoint `ckpt-<step>` (rank 0); returns its prefix, None on other ranks."""
        if self.manager is None:
            return None
        path = self.manager.save(checkpoint_number=int(step))
        if self._expected is not None and not self.saved:
            stored = [n for n, _ in tf.train.list_variables(path)
                      if n != "_CHECKPOINTABLE_OBJECT_GRAPH" and not n.startswith("save_counter")]
            if len(stored) != self._expected:
                raise RuntimeError(
                    f"{path} holds {len(stored)} variables, the model, optimizer and progress have "
                    f"{self._expected}: some state is not tracked by tf.train.Checkpoint"
                )
        self.saved.append(path)
        return path


# ----------------------------------------------------------------------------------------------
# Steps
# ----------------------------------------------------------------------------------------------


def make_train_step(model, optimizer: AdamW, backend, use_document_boundaries: bool):
    """The compiled data-parallel training step: (batch, dropout_seed) -> (loss, grad_norm)."""

    @tf.function
    def train_step(batch, dropout_seed):
        # Real (unpadded) label tokens, averaged over ranks: the loss below is normalized by it so
        # that averaging the ranks' gradients gives the gradient of the global token mean.
        tokens = backend.allreduce_mean(tf.reduce_sum(batch["loss_mask"]))
        with tf.GradientTape() as tape:
            logits = model(batch["inputs"], training=True, dropout_seed=dropout_seed,
                           **model_inputs(batch, use_document_boundaries))
            loss = masked_lm_loss(logits, batch["labels"], batch["loss_mask"], denominator=tokens)
        tape = backend.wrap_tape(tape)  # Horovod (step 4): gradients averaged over ranks
        grads = tape.gradient(loss, model.trainable_variables)
        grad_norm = optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return backend.allreduce_mean(loss), grad_norm

    return train_step


def make_eval_step(model, use_document_boundaries: bool):
    """The compiled evaluation step: batch -> (sum of token losses, number of real tokens)."""

    @tf.function
    def eval_step(batch):
        logits = model(batch["inputs"], training=False, **model_inputs(batch, use_document_boundaries))
        mask = batch["loss_mask"]
        return tf.reduce_sum(token_losses(logits, batch["labels"]) * mask), tf.reduce_sum(mask)

    return eval_step


def train_dataset(cfg: TrainConfig, dp_rank: int, dp_size: int, epoch: int, step_in_epoch: int):
    """This rank's training batches from a data position on (forever: the loop decides when to stop)."""
    from pipeline import tfdata

    return tfdata.make_dataset(
        cfg.train_data, global_batch_size=batch_sizes(cfg, dp_size)[1], dp_rank=dp_rank, dp_size=dp_size,
        seed=cfg.seed, shuffle=cfg.shuffle, epoch=epoch, start_step=step_in_epoch, num_epochs=None,
        verify=cfg.verify_data, features=_features(cfg), **reader_kwargs(cfg),
    )


def eval_dataset(cfg: TrainConfig, dp_rank: int, dp_size: int, is_chief: bool):
    """This rank's validation batches (the same global batches at every evaluation), or None."""
    from pipeline import tfdata

    if not cfg.val_data or cfg.eval_steps == 0:
        return None
    global_batch = batch_sizes(cfg, dp_size)[1]
    steps = min(cfg.eval_steps, tfdata.steps_per_epoch(cfg.val_data, global_batch))
    if steps == 0:
        if is_chief:
            LOG.warning("validation data %s cannot fill one global batch of %d: no evaluation", cfg.val_data,
                        global_batch)
        return None
    ds = tfdata.make_dataset(cfg.val_data, global_batch_size=global_batch, dp_rank=dp_rank, dp_size=dp_size,
                             shuffle=False, num_epochs=1, features=_features(cfg), **reader_kwargs(cfg))
    return ds.take(steps)


def _features(cfg: TrainConfig):
    return None if cfg.use_document_boundaries else ()


def _dropout_seed(seed: int, rank: int, step: int):
    return tf.constant([seed, (rank << 40) + step], tf.int64)


def seed_everything(seed: int) -> None:
    """Python, NumPy and TensorFlow seeds (tf.keras.utils.set_random_seed where it exists)."""
    set_seed = getattr(tf.keras.utils, "set_random_seed", None)  # TF >= 2.7
    if set_seed is not None:
        set_seed(seed)
        return
    import random

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def configure_tensorflow(cfg: TrainConfig) -> None:
    """Threads and determinism; call before TensorFlow runs anything."""
    if cfg.threads:
        tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
        tf.config.threading.set_inter_op_parallelism_threads(cfg.threads)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()


def _write_json(path: str, obj) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def finish_summary(cfg, rank: int, model, progress, summary: dict) -> None:
    """Record where a run ended (step, data position, weights digest); optionally dump the weights."""
    summary["final_step"] = int(progress.global_step.numpy())
    summary["position"] = list(progress.position())
    summary["weights_sha256"] = weights_digest(model.trainable_variables)
    if cfg.debug_dump:
        debug = os.path.join(cfg.output_dir, "debug")
        os.makedirs(debug, exist_ok=True)
        np.savez(os.path.join(debug, f"rank{rank}.npz"),
                 **{f"w{i:04d}": v.numpy() for i, v in enumerate(model.trainable_variables)})
        _write_json(os.path.join(debug, f"rank{rank}.json"), summary)


def weights_digest(variables) -> str:
    """sha256 over the bytes of `variables`, in order (equal weights <=> equal digests)."""
    h = hashlib.sha256()
    for v in variables:
        h.update(np.ascontiguousarray(np.asarray(v.numpy() if hasattr(v, "numpy") else v)).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def train(cfg: TrainConfig, backend) -> dict:
    """Train (or resume) until `cfg.max_steps`; returns a summary of this rank's run.

    Args:
        cfg: the run's configuration.
        backend: a `trainers.distributed` backend, already initialized (Horovod step 1).

    Returns:
        {"rank", "size", "start_step", "final_step", "losses" {step: loss}, "evals" [...],
         "checkpoints" [...] (empty off rank 0), "restored_from", "weights_sha256", "batches" (with
         debug_dump: {step: digests of this rank's records})}.
    """
    from pipeline import tfdata

    rank, size, chief = backend.rank(), backend.size(), backend.is_chief
    logging.basicConfig(level=logging.INFO if chief else logging.WARNING,
                        format=f"[rank {rank}] %(asctime)s %(levelname)s %(message)s")
    backend.pin_gpu()  # Horovod (step 2): one GPU per local rank
    configure_tensorflow(cfg)

    manifest = manifest_lib.load_manifest(cfg.train_data)
    mcfg = resolve_model_config(cfg, manifest)
    seq_len = int(manifest["seq_len"])
    per_rank, global_batch = batch_sizes(cfg, size)
    spe = tfdata.steps_per_epoch(cfg.train_data, global_batch)
    if spe == 0:
        raise SystemExit(
            f"{cfg.train_data}: {manifest['totals'].get('records', '?')} records cannot fill one global batch "
            f"of {global_batch}; lower the batch size"
        )

    seed_everything(cfg.seed)  # same initial weights everywhere (broadcast anyway)
    model = build_model(mcfg)
    # Horovod (step 3): scale the learning rate by the number of workers (when the batch grows with them).
    peak_lr = peak_learning_rate(cfg, size)
    schedule = WarmupCosine(peak_lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio)
    optimizer = AdamW(schedule, beta_1=cfg.beta_1, beta_2=cfg.beta_2, weight_decay=cfg.weight_decay,
                      clip_norm=cfg.clip_norm)
    optimizer.build(model.trainable_variables)
    progress = Progress()
    ckpt = Checkpointer(cfg.resolved_checkpoint_dir, chief, cfg.keep_checkpoints,
                        variables=[*model.variables, *optimizer.variables, *progress.variables],
                        model=model, optimizer=optimizer, progress=progress)
    signature = data_signature(cfg, manifest, size)

    restored_from, problem = None, None
    if chief:
        LOG.info("model %s: %s parameters (%s)", cfg.model, f"{mcfg.num_params():,}",
                 json.dumps(mcfg.to_dict(), sort_keys=True))
        _write_json(os.path.join(cfg.output_dir, "model_config.json"), mcfg.to_dict())
        _write_json(os.path.join(cfg.output_dir, "train_config.json"), dataclasses.asdict(cfg))
        restored_from = ckpt.latest()
        if restored_from:
            ckpt.restore(restored_from)
            saved = json.loads(progress.signature.numpy().decode() or "{}")
            problem = resume_problem(saved, signature, int(progress.step_in_epoch.numpy())) if saved else None
            if problem:
                LOG.error("cannot resume from %s: %s", restored_from, problem)
                progress.resume_error.assign(1)
            else:
                LOG.info("resumed from %s at step %d (epoch %d, step %d of %d)", restored_from,
                         *progress.position(), spe)
    # Horovod (step 5): rank 0's weights, optimizer state and data position on every rank (and its
    # verdict on the checkpoint, so that every rank stops together when it refuses to resume).
    backend.broadcast([*model.variables, *optimizer.slot_variables, *progress.numeric,
                       progress.resume_error])
    if int(progress.resume_error.numpy()):
        why = problem or "rank 0's log says why"
        raise SystemExit(f"rank {rank}: refusing to resume from {cfg.resolved_checkpoint_dir}: {why}")
    progress.signature.assign(json.dumps(signature, sort_keys=True))

    start_step, epoch, step_in_epoch = progress.position()
    logger = MetricsLogger(cfg.resolved_tensorboard_dir, os.path.join(cfg.output_dir, "metrics.jsonl"),
                           enabled=chief)
    profiler = ProfileWindow(os.path.join(cfg.output_dir, "profile"), cfg.profile_start,
                             cfg.profile_steps, enabled=chief)
    train_step = make_train_step(model, optimizer, backend, cfg.use_document_boundaries)
    eval_step = make_eval_step(model, cfg.use_document_boundaries)
    eval_ds = eval_dataset(cfg, rank, size, chief)
    hooks = loop.Hooks(
        step=lambda batch, step: train_step(batch, _dropout_seed(cfg.seed, rank, step)),
        save=ckpt.save,
        evaluate=None if eval_ds is None else lambda: loop.evaluate(eval_step, backend.allreduce_sum, eval_ds),
    )
    summary = {"rank": rank, "size": size, "start_step": start_step, "restored_from": restored_from,
               "losses": {}, "evals": [], "checkpoints": [], "steps_per_epoch": spe, "batches": {}}

    end_step = cfg.max_steps if cfg.stop_at is None else min(cfg.stop_at, cfg.max_steps)
    if start_step < end_step:
        iterator = iter(train_dataset(cfg, rank, size, epoch, step_in_epoch))
        if chief:
            LOG.info("training steps %d..%d of %d: %d steps/epoch, %d ranks x batch %d x %d tokens, lr %.3g",
                     start_step, end_step, cfg.max_steps, spe, size, per_rank, seq_len, peak_lr)
        with tfdata.shard_errors():  # a damaged shard: ShardIntegrityError naming it, on the rank that read it
            loop.run_steps(cfg, hooks, iterator=iterator, start_step=start_step, end_step=end_step,
                           steps_per_epoch=spe, tokens_per_step=global_batch * seq_len, optimizer=optimizer,
                           progress=progress, logger=logger, profiler=profiler, summary=summary, rank=rank,
                           is_chief=chief)
    elif chief:
        LOG.info("checkpoint is at step %d, the run ends at %d: nothing to train", start_step, end_step)

    loop.run_eval(hooks, logger, summary, int(progress.global_step.numpy()), chief)
    logger.close()
    finish_summary(cfg, rank, model, progress, summary)
    backend.barrier()
    return summary
