"""The training loop both trainers run: steps, NaN check, logging, evaluation and checkpoint cadence.

The data-parallel trainer (trainers/data_parallel.py: Horovod, smddp, one process) and the model-parallel
one (trainers/train_smp.py) differ in how a step is computed, how values are reduced over ranks and
how checkpoints are written; they hand those in as `Hooks`. Everything else about a run's steps is
here, once: fetch (timed, to measure input wait), step, advance the data position, log every
`log_every` steps and at the last (rank 0 writes; a non-finite loss stops the run on every rank),
profile a window of steps, evaluate every `eval_every` steps and at the end, checkpoint every
`checkpoint_every` steps and at the last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from trainers.profiling import StepTimer

LOG = logging.getLogger("trainers")


@dataclasses.dataclass(frozen=True)
class Hooks:
    """What a trainer does its own way.

    Attributes:
        step: (batch, global step) -> (loss averaged over ranks, gradient norm).
        save: checkpoint after `done` steps; returns where it was written (None on ranks that do not write).
        evaluate: validation over every rank -> {"loss", "perplexity", "tokens"}; None: no validation.
        reduce_sum: sum of a scalar over every rank (for evaluation).
        after_first_step: runs once, after the run's first step (SMP broadcasts then).
        data_scalars: global step -> the data's own scalars (a mixture's tokens seen per source),
            logged as `mixture/...` at every logging step; None: none.
    """

    step: Callable[[dict, int], tuple]
    save: Callable[[int], str | None]
    evaluate: Callable[[], dict] | None = None
    after_first_step: Callable[[], None] | None = None
    data_scalars: Callable[[int], dict] | None = None


def record_digests(batch: dict) -> list[str]:
    """A short digest of each record of a batch (its inputs): which records a step saw, whatever the ranks."""
    rows = np.ascontiguousarray(batch["inputs"].numpy())
    return [hashlib.sha1(row.tobytes()).hexdigest()[:16] for row in rows]


def run_steps(cfg, hooks: Hooks, *, iterator, start_step: int, end_step: int, steps_per_epoch: int,
              tokens_per_step: int, optimizer, progress, logger, profiler, summary: dict, rank: int,
              is_chief: bool) -> None:
    """Steps `start_step`..`end_step` - 1 of a run; fills `summary` ("losses", "evals", "batches").

    Args:
        cfg: the run's TrainConfig.
        hooks: the trainer's own step, checkpoint and evaluation.
        iterator: this rank's batches, from `start_step` on.
        start_step: the first global step to run.
        end_step: one past the last step of this process.
        steps_per_epoch: global steps per epoch (moves the data position).
        tokens_per_step: label positions per step over every rank (throughput).
        optimizer: has `current_learning_rate()`.
        progress: the run's Progress (advanced once per step).
        logger: MetricsLogger (writes on rank 0).
        profiler: ProfileWindow.
        summary: this rank's summary, updated in place.
        rank: this process's rank (in messages).
        is_chief: rank 0: the one that logs.

    Raises:
        FloatingPointError: the loss is not finite (on every rank: the loss is the ranks' mean).
    """
    timer = StepTimer(tokens_per_step)
    for step in range(start_step, end_step):
        profiler.before_step(step)
        timer.start_fetch()
        batch = next(iterator)
        timer.end_fetch()
        lr = float(optimizer.current_learning_rate())
        loss, grad_norm = hooks.step(batch, step)
        if step == start_step and hooks.after_first_step is not None:
            hooks.after_first_step()
        timer.step_done()
        progress.advance(steps_per_epoch)
        done = step + 1
        last = done == end_step
        if cfg.debug_dump:
            summary["batches"][done] = record_digests(batch)
        if done % cfg.log_every == 0 or last:
            value = float(loss)  # host sync: the window's device work is done
            if not np.isfinite(value):
                raise FloatingPointError(f"rank {rank}: loss is {value} at step {done}")
            metrics = {"loss": value, "learning_rate": lr, "grad_norm": float(grad_norm), **timer.window_metrics()}
            summary["losses"][done] = value
            logger.log(done, metrics, epoch=int(progress.epoch.numpy()))
            if is_chief and hooks.data_scalars is not None:
                logger.log(done, hooks.data_scalars(done), prefix="mixture")
            if is_chief:
                LOG.info("step %d/%d loss %.4f lr %.3g %.0f tok/s step %.3fs input wait %.0f%%", done,
                         cfg.max_steps, value, lr, metrics["tokens_per_sec"], metrics["step_time_s"],
                         100 * metrics["input_wait_fraction"])
        profiler.after_step(step)
        if cfg.eval_every and done % cfg.eval_every == 0 and not last:
            run_eval(hooks, logger, summary, done, is_chief)
            timer.reset()
        if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or last:
            path = hooks.save(done)
            if path:
                summary["checkpoints"].append(path)
                LOG.info("checkpoint %s", path)
            timer.reset()
    profiler.close()


def evaluate(eval_step, reduce_sum, dataset) -> dict:
    """Mean token loss and perplexity over every rank's validation batches.

    Args:
        eval_step: batch -> (sum of token losses, number of real tokens) on this rank.
        reduce_sum: sum of a scalar over every rank.
        dataset: this rank's validation batches.
    """
    total = tf.constant(0.0)
    count = tf.constant(0.0)
    for batch in dataset:
        loss_sum, n = eval_step(batch)
        total += tf.cast(loss_sum, tf.float32)
        count += tf.cast(n, tf.float32)
    total = float(reduce_sum(total))
    count = float(reduce_sum(count))
    loss = total / max(count, 1.0)
    return {"loss": loss, "perplexity": float(np.exp(min(loss, 50.0))), "tokens": count}


def run_eval(hooks: Hooks, logger, summary: dict, step: int, is_chief: bool) -> None:
    """Validate (when the trainer has validation data), log it and add it to the summary."""
    if hooks.evaluate is None:
        return
    start = time.perf_counter()
    result = hooks.evaluate()
    summary["evals"].append({"step": step, **result})
    logger.log(step, {"loss": result["loss"], "perplexity": result["perplexity"]}, prefix="val")
    if is_chief:
        LOG.info("step %d validation loss %.4f perplexity %.2f (%d tokens, %.1fs)", step, result["loss"],
                 result["perplexity"], result["tokens"], time.perf_counter() - start)
