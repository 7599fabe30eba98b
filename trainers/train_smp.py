"""Model-parallel training with SageMaker's model parallelism library (`smdistributed.modelparallel`).

The library exists only inside SageMaker's TensorFlow training containers, launched with MPI and
`distribution={"smdistributed": {"modelparallel": {"enabled": True, "parameters": {...}}},
"mpi": {...}}` (`python -m trainers.launch_sagemaker --trainer smp`). Anywhere else this script stops
with a message saying so. `--smp_emulation` runs it in one process against
trainers/smp_emulation.py (one partition, no pipelining) to exercise everything around the library:
the model, the reader sharded by `dp_rank()`, microbatch splitting and accumulation, metrics and
checkpoints; tests do that.

The library's recipe, marked `# SMP:` where it happens:
  * `smp.init()`; the model subclasses `smp.DistributedModel` (here around the shared DecoderStack);
  * the reader shards by `smp.dp_rank()` / `smp.dp_size()` (model-parallel peers of one replica get
    the same batches, each replica its slice of the global batch), drops incomplete batches and
    seeds its order with (seed, epoch);
  * forward and backward run inside an `@smp.step` function, once per microbatch; outside it the
    gradients are `accumulate()`d, the loss `reduce_mean()`ed (predictions would be `merge()`d);
  * several model replicas (hybrid model + data parallelism, `"horovod": true` in the parameters)
    all-reduce the accumulated gradients with Horovod and broadcast the variables after the first
    step (the partitioned model exists only once the first step has run);
  * checkpoints with `smp.CheckpointManager`, saved by `dp_rank() == 0` (one writer per partition).

This is SMP's own path; Horovod, smddp and a one-process run share the data-parallel one
(trainers/data_parallel.py). The step loop (logging, evaluation and checkpoint cadence) is
trainers/loop.py, shared by both. Differences from the data-parallel trainer: the loss is each
microbatch's token mean, averaged over microbatches (equal to the token mean unless padding differs
between microbatches: only one record per pipeline job is padded); dropout is the library-friendly
stateful kind, so an exact resume needs --dropout 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if __package__ in (None, ""):  # run as a file (SageMaker's entry_point): make the repo importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

from trainers import loop  # noqa: E402
from trainers.checkpoint import Progress  # noqa: E402
from trainers.config import (  # noqa: E402
    TrainConfig,
    add_train_args,
    batch_sizes,
    config_from_args,
    peak_learning_rate,
    resolve_model_config,
)
from trainers.data import (  # noqa: E402
    data_signature,
    eval_dataset,
    open_train_data,
    resume_problem,
    train_dataset,
)
from trainers.loss import masked_lm_loss, model_inputs, token_losses  # noqa: E402
from trainers.microbatch import check_microbatches  # noqa: E402
from trainers.model import DecoderStack, ModelConfig  # noqa: E402
from trainers.optim import AdamW, WarmupCosine  # noqa: E402
from trainers.profiling import MetricsLogger, ProfileWindow  # noqa: E402
from trainers.runtime import (  # noqa: E402
    LOG,
    configure_tensorflow,
    finish_summary,
    seed_everything,
    setup_logging,
    write_run_configs,
)

MISSING_LIBRARY = (
    "smdistributed.modelparallel.tensorflow is not importable: SageMaker's model parallelism library "
    "exists only inside SageMaker's TensorFlow training containers (launch this script with "
    "`python -m trainers.launch_sagemaker --trainer smp`). To check the script elsewhere, run it with "
    "--smp_emulation (one process, no partitioning); for data parallelism on your own machines use "
    "trainers/train_horovod.py."
)


def load_smp(emulate: bool, microbatches: int):
    """The library (initialized), or the one-process emulation; SystemExit when it is missing."""
    if emulate:
        from trainers import smp_emulation as smp

        smp.init(microbatches=microbatches)
        return smp
    try:
        import smdistributed.modelparallel.tensorflow as smp
    except ImportError as e:
        raise SystemExit(f"{MISSING_LIBRARY} ({e})") from e
    smp.init()  # SMP: initialize (reads the partitions/microbatches SageMaker launched it with)
    return smp


def num_microbatches(smp, default: int, mp_parameters: str | None = None) -> int:
    """Microbatches per step.

    The library's value, else the job's modelparallel parameters (the `--mp_parameters` SageMaker
    passes, or $SM_HP_MP_PARAMETERS), else `default`.
    """
    fn = getattr(smp, "num_microbatches", None)
    if callable(fn):
        return int(fn())
    params = json.loads(mp_parameters or os.environ.get("SM_HP_MP_PARAMETERS", "") or "{}")
    return int(params.get("microbatches", default))


def make_smp_model(smp, config: ModelConfig):
    """SMP: the model as a subclass of `smp.DistributedModel`, around the shared DecoderStack."""

    class SMPDecoderLM(smp.DistributedModel):
        def __init__(self):
            super().__init__(name="decoder_lm")
            self.decoder = DecoderStack(config, name="decoder")

        def call(self, inputs, segment_ids=None, positions=None, training=False):
            return self.decoder(inputs, segment_ids=segment_ids, positions=positions, training=training)

    return SMPDecoderLM()


def make_step_functions(smp, model, optimizer: AdamW, hvd, use_document_boundaries: bool):
    """(train_step, eval_step) written to the library's API."""

    @smp.step
    def forward_backward(batch):
        # SMP: runs once per microbatch; `batch` is this microbatch's share of every tensor.
        logits = model(batch["inputs"], training=True, **model_inputs(batch, use_document_boundaries))
        loss = masked_lm_loss(logits, batch["labels"], batch["loss_mask"])
        # The library's TF examples take gradients symbolically inside the step
        # (`optimizer.get_gradients`, i.e. tf.gradients); Keras 3 optimizers no longer have it.
        grads = tf.gradients(loss, model.trainable_variables)
        return grads, loss

    @tf.function
    def train_step(batch):
        grads, loss = forward_backward(batch)
        grads = [g.accumulate() for g in grads]  # SMP: mean over microbatches
        if hvd is not None:  # Horovod: average over the model replicas (the data-parallel group)
            grads = [hvd.allreduce(g) for g in grads]
        grad_norm = optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        loss = loss.reduce_mean()  # SMP: mean over microbatches
        if hvd is not None:
            loss = hvd.allreduce(loss)
        return loss, grad_norm

    @smp.step
    def forward(batch):
        logits = model(batch["inputs"], training=False, **model_inputs(batch, use_document_boundaries))
        mask = batch["loss_mask"]
        return tf.reduce_sum(token_losses(logits, batch["labels"]) * mask), tf.reduce_sum(mask)

    @tf.function
    def eval_step(batch):
        loss_sum, tokens = forward(batch)
        return loss_sum.reduce_sum(), tokens.reduce_sum()

    return train_step, eval_step


def _dummy_batch(batch_size: int, seq_len: int, use_document_boundaries: bool, manifest: dict) -> dict:
    """A batch of the reader's structure (all padding-free zeros) to build the model with."""
    shape = [batch_size, seq_len]
    batch = {"inputs": tf.zeros(shape, tf.int32), "labels": tf.zeros(shape, tf.int32),
             "loss_mask": tf.ones(shape, tf.float32)}
    if use_document_boundaries and "segment_ids" in manifest.get("features", {}):
        batch["segment_ids"] = tf.ones(shape, tf.int32)
        batch["positions"] = tf.tile(tf.range(seq_len)[None, :], [batch_size, 1])
    return batch


def train(cfg: TrainConfig, smp, microbatches_default: int = 1, mp_parameters: str | None = None) -> dict:
    """Train with the library's API (or its emulation); returns this process's summary."""
    from pipeline import tfdata

    rank, chief = smp.rank(), smp.rank() == 0
    dp_rank, dp_size = smp.dp_rank(), smp.dp_size()
    setup_logging(rank, chief)
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:  # one GPU per process
        tf.config.experimental.set_memory_growth(gpus[smp.local_rank() % len(gpus)], True)
        tf.config.set_visible_devices(gpus[smp.local_rank() % len(gpus)], "GPU")
    configure_tensorflow(cfg)
    hvd = None
    if dp_size > 1:
        # Hybrid model + data parallelism: "horovod": true in the smp parameters; smp.init() sets up
        # Horovod over the data-parallel group (AWS's TF examples call no hvd.init()).
        import horovod.tensorflow as hvd

    microbatches = num_microbatches(smp, microbatches_default, mp_parameters)
    per_replica, global_batch = batch_sizes(cfg, dp_size)
    check_microbatches(per_replica, microbatches)
    data = open_train_data(cfg, global_batch)  # one output or a mixture
    manifest, spe = data.manifest, data.steps_per_epoch
    mcfg = resolve_model_config(cfg, manifest)
    seq_len = int(manifest["seq_len"])

    seed_everything(cfg.seed)
    model = make_smp_model(smp, mcfg)  # SMP: partitioned on the first smp.step call
    peak_lr = peak_learning_rate(cfg, dp_size)
    optimizer = AdamW(WarmupCosine(peak_lr, cfg.warmup_steps, cfg.max_steps, cfg.min_lr_ratio),
                      beta_1=cfg.beta_1, beta_2=cfg.beta_2, weight_decay=cfg.weight_decay,
                      clip_norm=cfg.clip_norm)
    progress = Progress()
    train_step, eval_step = make_step_functions(smp, model, optimizer, hvd, cfg.use_document_boundaries)
    # SMP: the first smp.step call partitions the model and creates its variables. Make that call a
    # forward pass on a dummy batch, then create the optimizer's slots, so that a checkpoint is
    # restored into existing variables (restoring into variables created later, inside the first
    # training step, is fragile: Keras 3 then creates a second, orphaned embedding table).
    eval_step(_dummy_batch(per_replica, seq_len, cfg.use_document_boundaries, manifest))
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, progress=progress)
    manager = smp.CheckpointManager(checkpoint, directory=cfg.resolved_checkpoint_dir,
                                    max_to_keep=cfg.keep_checkpoints)
    signature = data_signature(cfg, manifest, dp_size, data.mixture)
    restored_from = manager.latest_checkpoint
    if restored_from:
        status = manager.restore()
        if hasattr(status, "assert_existing_objects_matched"):
            status.assert_existing_objects_matched()
        saved = json.loads(progress.signature.numpy().decode() or "{}")
        problem = resume_problem(saved, signature, int(progress.step_in_epoch.numpy())) if saved else None
        if problem:
            raise SystemExit(f"cannot resume from {restored_from}: {problem}")
        if chief:
            LOG.info("resuming from %s at step %d (epoch %d, step %d of %d)", restored_from,
                     *progress.position(), spe)
    progress.signature.assign(json.dumps(signature, sort_keys=True))
    if chief:
        LOG.info("model %s: %s parameters; %d replica(s) x %d microbatches of %d", cfg.model,
                 f"{mcfg.num_params():,}", dp_size, microbatches, per_replica // microbatches)
        write_run_configs(cfg, mcfg)

    logger = MetricsLogger(cfg.resolved_tensorboard_dir, os.path.join(cfg.output_dir, "metrics.jsonl"),
                           enabled=chief)
    profiler = ProfileWindow(os.path.join(cfg.output_dir, "profile"), cfg.profile_start, cfg.profile_steps,
                             enabled=chief)
    start_step, epoch, step_in_epoch = progress.position()
    data.resume(restored_from, start_step)  # a mixture's reader state, from beside the checkpoint
    end_step = cfg.max_steps if cfg.stop_at is None else min(cfg.stop_at, cfg.max_steps)
    summary = {"rank": rank, "dp_rank": dp_rank, "dp_size": dp_size, "start_step": start_step,
               "restored_from": restored_from, "losses": {}, "evals": [], "checkpoints": [], "batches": {},
               "microbatches": microbatches, "emulated": bool(getattr(smp, "EMULATED", False))}

    def reduce_sum(value):
        if hvd is None:
            return value
        return hvd.allreduce(tf.convert_to_tensor(value), op=hvd.Sum)

    def after_first_step():
        if hvd is not None:  # Horovod: after the first step, when the partitioned variables exist.
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)

    def save(done: int) -> str | None:
        return manager.save() if dp_rank == 0 else None  # SMP: one writer per partition

    val = eval_dataset(cfg, dp_rank, dp_size, chief)
    hooks = loop.Hooks(
        step=lambda batch, step: train_step(batch),
        save=data.saving(save),
        evaluate=None if val is None else lambda: loop.evaluate(eval_step, reduce_sum, val),
        after_first_step=after_first_step,
        data_scalars=data.scalars,
    )
    if start_step < end_step:
        # SMP: shard by dp_rank/dp_size: the replica's slice of every global batch.
        iterator = iter(train_dataset(cfg, dp_rank, dp_size, epoch, step_in_epoch, data.mixture))
        with tfdata.shard_errors():
            loop.run_steps(cfg, hooks, iterator=iterator, start_step=start_step, end_step=end_step,
                           steps_per_epoch=spe, tokens_per_step=global_batch * seq_len, optimizer=optimizer,
                           progress=progress, logger=logger, profiler=profiler, summary=summary, rank=rank,
                           is_chief=chief)
    loop.run_eval(hooks, logger, summary, int(progress.global_step.numpy()), chief)
    logger.close()
    finish_summary(cfg, rank, model, progress, summary)
    smp.barrier()
    return summary


def build_parser() -> argparse.ArgumentParser:
    """Shared training flags plus the emulation switches."""
    p = argparse.ArgumentParser(prog="python -m trainers.train_smp", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smp_emulation", action="store_true",
                   help="run without the library, in one process (trainers/smp_emulation.py)")
    p.add_argument("--microbatches", type=int, default=1,
                   help="microbatches per step under --smp_emulation (SageMaker passes the real value "
                        "in the job's modelparallel parameters)")
    # SageMaker passes the modelparallel parameters to the script as this hyperparameter.
    p.add_argument("--mp_parameters", default=None, help=argparse.SUPPRESS)
    return add_train_args(p)


def main(argv=None) -> dict:
    """Parse flags, load the library (or its emulation) and train."""
    args = build_parser().parse_args(argv)
    cfg = config_from_args(args)
    smp = load_smp(args.smp_emulation, args.microbatches)
    return train(cfg, smp, microbatches_default=args.microbatches, mp_parameters=args.mp_parameters)


if __name__ == "__main__":
    main()
