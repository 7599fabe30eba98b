"""A training run's options: one frozen dataclass, every trainer flag declared once with `option()`.

The flags (`add_train_args`), their `--help` and the run's `train_config.json` derive from
`TrainConfig` (pipeline/core/options.py). SageMaker passes hyperparameters as these flags and
gives the data and output locations in its environment (`$SM_CHANNEL_TRAIN`, `$SM_MODEL_DIR`,
...): those become the defaults of the flags that are not given. Also here: what follows from the
config alone (batch sizes per rank and per step, the peak learning rate, the model's config).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from pipeline.core.options import UsageError, add_options, option, values_from
from trainers.model import PRESETS, ModelConfig, model_config


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; `config_from_args` builds it from the command line."""

    train_data: str = option(
        None, help="pipeline output directory (manifest.json inside), local, EFS mount or s3://, or a "
        "mixture: a mixture.json or a --per_subset output's directory (default: $SM_CHANNEL_TRAIN)")
    output_dir: str = option(
        None, help="metrics, TensorBoard, configs, profile traces (default: $SM_MODEL_DIR or out/train)")
    val_data: str | None = option(
        None, help="validation output of the pipeline, --split val (default: $SM_CHANNEL_VAL)")
    checkpoint_dir: str | None = option(
        None, help="where checkpoints go (default: <output_dir>/checkpoints; /opt/ml/checkpoints on SageMaker)")
    tensorboard_dir: str | None = option(
        None, help="where TensorBoard event files go (default: <output_dir>/tensorboard; "
        "/opt/ml/output/tensorboard on SageMaker)")
    model: str = option("tiny", choices=tuple(sorted(PRESETS)), help="preset in trainers.model.PRESETS")
    d_model: int | None = option(None, help="override the preset")
    n_layers: int | None = option(None, help="override the preset")
    n_heads: int | None = option(None, help="override the preset")
    d_ff: int | None = option(None, help="override the preset")
    max_seq_len: int | None = option(None, help="override the preset (default: the manifest's seq_len)")
    dropout: float = option(0.0, help="dropout rate")
    tie_embeddings: bool = option(True, help="share the input embedding with the output projection")
    mixed_precision: bool = option(False, help="bfloat16 compute, float32 weights")
    use_document_boundaries: bool = option(
        True, help="mask attention to each packed document and restart positions (when the shards were "
        "written with --document_boundaries)")
    batch_size: int = option(8, help="records per rank (without --global_batch_size)")
    global_batch_size: int | None = option(
        None, help="records per step over all ranks (each rank takes 1/size of it): the data order is then "
        "the same for any number of ranks, and a run resumes on another number of ranks that divides it; "
        "--learning_rate is then for this batch (not scaled)")
    max_steps: int = option(1000, help="total steps of the run; the learning-rate schedule spans them")
    stop_at: int | None = option(
        None, help="stop this process after this global step and checkpoint (a time-limited job); a later "
        "run with the same flags resumes")
    learning_rate: float = option(3e-4, help="for one worker (for the whole batch with --global_batch_size)")
    scale_lr: bool = option(
        True, help="multiply the learning rate by the number of workers (Horovod's recipe, for a global "
        "batch that grows with them; not with --global_batch_size)")
    warmup_steps: int = option(100, help="linear warm-up steps of the learning rate")
    min_lr_ratio: float = option(0.1, help="the cosine decay's floor, as a share of the peak")
    weight_decay: float = option(0.1, help="AdamW's decoupled weight decay")
    beta_1: float = option(0.9, help="AdamW's beta_1")
    beta_2: float = option(0.95, help="AdamW's beta_2")
    clip_norm: float = option(1.0, help="global gradient-norm clipping")
    seed: int = option(1234, help="model init, data order (with epoch and rank), dropout (with step and rank)")
    shuffle: bool = option(True, help="the reader's seeded shuffle")
    shuffle_buffer: int | None = option(None, help="reader's records per shuffle window (default: the reader's)")
    num_parallel_reads: int | None = option(None, help="reader's concurrent windows (default: the reader's)")
    verify_data: bool = option(False, help="sha256 of every shard before step 0")
    log_every: int = option(10, help="steps between metrics lines")
    eval_every: int = option(0, help="steps between evaluations; 0: after the last step only")
    eval_steps: int = option(50, help="batches per rank per evaluation")
    checkpoint_every: int = option(500, help="steps between checkpoints; 0: at the end only")
    keep_checkpoints: int = option(3, help="checkpoints kept")
    profile_start: int | None = option(None, help="capture a tf.profiler trace from this step (rank 0)")
    profile_steps: int = option(3, help="steps of the tf.profiler trace")
    deterministic: bool = option(False, help="tf.config.experimental.enable_op_determinism()")
    threads: int = option(0, help="intra/inter-op threads (0: TensorFlow's default)")
    debug_dump: bool = option(
        False, help="every rank writes its final weights and a summary to <output_dir>/debug/rank<r>.{npz,json}")

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


def sagemaker_defaults(environ=os.environ) -> dict:
    """The defaults SageMaker's environment gives to the flags (empty variables count as unset)."""
    env = {k: v for k, v in environ.items() if v}
    on_sagemaker = "SM_MODEL_DIR" in env
    return {
        "train_data": env.get("SM_CHANNEL_TRAIN"),
        "val_data": env.get("SM_CHANNEL_VAL"),
        "output_dir": env.get("SM_MODEL_DIR", "out/train"),
        "checkpoint_dir": "/opt/ml/checkpoints" if on_sagemaker else None,
        "tensorboard_dir": "/opt/ml/output/tensorboard" if on_sagemaker else None,
    }


def add_train_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags of every trainer (SageMaker passes hyperparameters as these flags)."""
    add_options(p, TrainConfig)
    p.add_argument("--model_dir", default=None, help=argparse.SUPPRESS)  # SageMaker's TF estimator may pass it
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """A TrainConfig from flags parsed by a parser that `add_train_args` built (other attributes are ignored).

    A flag's bad value is reported as argparse reports its own errors: one line naming the flag, exit 2.
    """
    try:
        given = values_from(TrainConfig, args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    values = {**sagemaker_defaults(), **given}
    if not values["train_data"]:
        raise SystemExit("--train_data is required (or $SM_CHANNEL_TRAIN): the pipeline's output directory")
    return TrainConfig(**values)


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
