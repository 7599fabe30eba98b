"""The data-parallel trainer: Horovod, SageMaker's data-parallel library (smddp) and a one-process run.

All three take this path; they differ only in their backend (trainers/data_parallel_backends.py).
The model-parallel trainer (SMP) has its own, trainers/train_smp.py. Horovod's six steps, each
marked `# Horovod (step N)` where it happens:
  1. init (the backend's constructor: `hvd.init()` / `sdp.init()`);
  2. pin one GPU per local rank (`backend.pin_gpu()`);
  3. scale the learning rate by the number of workers (`--scale_lr`, on by default);
  4. wrap the tape in `DistributedGradientTape` (`backend.wrap_tape`);
  5. broadcast the variables from rank 0. Horovod's example does it after the first step because a
     Keras optimizer creates its slots inside the first `apply_gradients`; ours (trainers/optim.py)
     are built before step 1, so the broadcast runs *before* the first step, which also makes a
     checkpoint restored on rank 0 alone reach every rank before any gradient is computed;
  6. checkpoint on rank 0 only (`Checkpointer`), and log on rank 0 only (`MetricsLogger`).

Data: each rank reads its slice of every global batch, and a resume is exact (trainers/data.py).
Loss: normalized by the number of real tokens across all ranks (trainers/loss.py). The step loop
itself (logging, evaluation and checkpoint cadence) is trainers/loop.py, shared with the
model-parallel trainer.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from trainers import loop
from trainers.checkpoint import Checkpointer, Progress
from trainers.config import TrainConfig, batch_sizes, peak_learning_rate, resolve_model_config
from trainers.data import data_signature, eval_dataset, open_train_data, resume_problem, train_dataset
from trainers.loss import masked_lm_loss, model_inputs, token_losses
from trainers.model import build_model
from trainers.optim import AdamW, WarmupCosine
from trainers.profiling import MetricsLogger, ProfileWindow
from trainers.runtime import (
    LOG,
    configure_tensorflow,
    finish_summary,
    seed_everything,
    setup_logging,
    write_run_configs,
)


def make_train_step(model, optimizer: AdamW, backend, use_document_boundaries: bool):
    """The compiled data-parallel training step: (batch, dropout_seed) -> (loss, grad_norm)."""

    # No autograph: the step's control flow is Python's own (flags, layer lists), and transpiling every
    # function it calls (the model, Horovod's tape) costs seconds at every process start.
    @tf.function(autograph=False)
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

    @tf.function(autograph=False)  # as the training step
    def eval_step(batch):
        logits = model(batch["inputs"], training=False, **model_inputs(batch, use_document_boundaries))
        mask = batch["loss_mask"]
        return tf.reduce_sum(token_losses(logits, batch["labels"]) * mask), tf.reduce_sum(mask)

    return eval_step


def _dropout_seed(seed: int, rank: int, step: int):
    # Stateless dropout: (seed, rank, step) gives each rank and step its own mask, the same on a resume.
    return tf.constant([seed, (rank << 40) + step], tf.int64)


def train(cfg: TrainConfig, backend) -> dict:
    """Train (or resume) until `cfg.max_steps`; returns a summary of this rank's run.

    Args:
        cfg: the run's configuration.
        backend: a backend of trainers/data_parallel_backends.py, already initialized (Horovod step 1).

    Returns:
        {"rank", "size", "start_step", "final_step", "losses" {step: loss}, "evals" [...],
         "checkpoints" [...] (empty off rank 0), "restored_from", "weights_sha256", "batches" (with
         debug_dump: {step: digests of this rank's records})}.
    """
    from pipeline import tfdata

    rank, size, chief = backend.rank(), backend.size(), backend.is_chief
    setup_logging(rank, chief)
    backend.pin_gpu()  # Horovod (step 2): one GPU per local rank
    configure_tensorflow(cfg)

    per_rank, global_batch = batch_sizes(cfg, size)
    data = open_train_data(cfg, global_batch)  # one output or a mixture
    manifest, spe = data.manifest, data.steps_per_epoch
    mcfg = resolve_model_config(cfg, manifest)
    seq_len = int(manifest["seq_len"])

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
    signature = data_signature(cfg, manifest, size, data.mixture)

    restored_from, problem = None, None
    if chief:
        LOG.info("model %s: %s parameters (%s)", cfg.model, f"{mcfg.num_params():,}",
                 json.dumps(mcfg.to_dict(), sort_keys=True))
        write_run_configs(cfg, mcfg)
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
    # A mixture's reader state, on every rank (checkpoints are numbered by step: ckpt-<step>).
    data.resume(restored_from or os.path.join(cfg.resolved_checkpoint_dir, f"ckpt-{start_step}"), start_step)
    logger = MetricsLogger(cfg.resolved_tensorboard_dir, os.path.join(cfg.output_dir, "metrics.jsonl"),
                           enabled=chief)
    profiler = ProfileWindow(os.path.join(cfg.output_dir, "profile"), cfg.profile_start,
                             cfg.profile_steps, enabled=chief)
    train_step = make_train_step(model, optimizer, backend, cfg.use_document_boundaries)
    eval_step = make_eval_step(model, cfg.use_document_boundaries)
    eval_ds = eval_dataset(cfg, rank, size, chief)
    hooks = loop.Hooks(
        step=lambda batch, step: train_step(batch, _dropout_seed(cfg.seed, rank, step)),
        save=data.saving(ckpt.save),
        evaluate=None if eval_ds is None else lambda: loop.evaluate(eval_step, backend.allreduce_sum, eval_ds),
        data_scalars=data.scalars,
    )
    summary = {"rank": rank, "size": size, "start_step": start_step, "restored_from": restored_from,
               "losses": {}, "evals": [], "checkpoints": [], "steps_per_epoch": spe, "batches": {}}

    end_step = cfg.max_steps if cfg.stop_at is None else min(cfg.stop_at, cfg.max_steps)
    if start_step < end_step:
        iterator = iter(train_dataset(cfg, rank, size, epoch, step_in_epoch, data.mixture))
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
