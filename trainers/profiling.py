"""Whether the input pipeline keeps up, measured by the trainer itself, and what TensorBoard shows.

SageMaker Debugger's system profile (GPU, CPU and I/O utilisation) shows an input-bound job only
indirectly. The number that shows it directly is the fraction of each step spent waiting for the
next batch; with it, TensorBoard gets loss, learning rate, tokens/s and step time (`StepTimer`, `MetricsLogger`),
and `ProfileWindow` captures a `tf.profiler` trace of a few steps (TensorBoard's Profile tab, with
the tensorboard-plugin-profile package) to see where the time goes inside a step.

Timing model, per logging window of n steps (host wall clock):
    input_wait   = sum over steps of the time `next(iterator)` blocked
    step_time_s  = window wall time / n                 (includes the wait)
    input_wait_fraction = input_wait / window wall time (0: input keeps up; -> 1: input-bound)
    tokens_per_sec = n * batch_size * seq_len * dp_size / window wall time
The window ends with a host sync (reading the loss), so queued device work is counted in the window
it belongs to.
"""

from __future__ import annotations

import json
import os
import time

import tensorflow as tf
from tensorflow.core.framework import summary_pb2


class StepTimer:
    """Accumulates input-wait and wall time over a logging window."""

    def __init__(self, tokens_per_step: int, clock=time.perf_counter):
        self.tokens_per_step = int(tokens_per_step)  # global: batch * seq_len * dp_size
        self._clock = clock
        self._window_start = clock()
        self._wait = 0.0
        self._steps = 0
        self._fetch_start: float | None = None

    def start_fetch(self) -> None:
        """Call right before asking the input pipeline for the next batch."""
        self._fetch_start = self._clock()

    def end_fetch(self) -> None:
        """Call right after the batch arrived."""
        if self._fetch_start is not None:
            self._wait += self._clock() - self._fetch_start
            self._fetch_start = None

    def step_done(self) -> None:
        """Count one step in the window."""
        self._steps += 1

    def reset(self) -> None:
        """Start a new window now (e.g. after an evaluation or a checkpoint, which are not steps)."""
        self._window_start = self._clock()
        self._wait = 0.0
        self._steps = 0

    def window_metrics(self) -> dict[str, float]:
        """Metrics of the window since the last call (call after a host sync); starts a new one."""
        elapsed = max(self._clock() - self._window_start, 1e-9)
        steps = max(self._steps, 1)
        out = {
            "step_time_s": elapsed / steps,
            "tokens_per_sec": self._steps * self.tokens_per_step / elapsed,
            "input_wait_fraction": min(self._wait / elapsed, 1.0),
            "input_wait_s": self._wait / steps,
        }
        self.reset()
        return out


class ProfileWindow:
    """Capture a `tf.profiler` trace for steps [start, start + num_steps) on this process.

    The trace lands in `logdir/plugins/profile/<run>/` (`*.xplane.pb`), where TensorBoard finds it.
    """

    def __init__(self, logdir: str, start: int | None, num_steps: int = 3, enabled: bool = True):
        self.logdir = logdir
        self.start = start
        self.stop_at = None if start is None else start + max(int(num_steps), 1)
        self.enabled = enabled and start is not None
        self.active = False
        self.captured = False

    def before_step(self, step: int) -> None:
        """Start tracing when `step` is the first step of the window."""
        if self.enabled and not self.active and not self.captured and step >= self.start:
            tf.profiler.experimental.start(self.logdir)
            self.active = True

    def after_step(self, step: int) -> None:
        """Stop tracing after the window's last step."""
        if self.active and step + 1 >= self.stop_at:
            self.close()

    def close(self) -> None:
        """Stop a trace still running (end of training inside the window)."""
        if self.active:
            tf.profiler.experimental.stop()
            self.active = False
            self.captured = True


def _scalar_metadata() -> summary_pb2.SummaryMetadata:
    # What tensorboard.summary.v2.scalar attaches; written directly so that logging needs no
    # tensorboard package (TF 2.21 no longer installs it; TensorBoard reads these as scalars).
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )


def write_scalar(name: str, value: float, step: int) -> None:
    """A TensorBoard scalar on the default summary writer."""
    tf.summary.write(name, tf.constant(float(value), tf.float32), step=int(step), metadata=_scalar_metadata())


class MetricsLogger:
    """TensorBoard scalars plus one JSON line per record (`metrics.jsonl`); a no-op off rank 0."""

    def __init__(self, tensorboard_dir: str | None, jsonl_path: str | None, enabled: bool = True):
        self.enabled = enabled
        self._writer = None
        self._jsonl = None
        if not enabled:
            return
        if tensorboard_dir:
            self._writer = tf.summary.create_file_writer(tensorboard_dir)
        if jsonl_path:
            os.makedirs(os.path.dirname(jsonl_path) or ".", exist_ok=True)
            self._jsonl = open(jsonl_path, "a", encoding="utf-8")  # closed in close()

    def log(self, step: int, scalars: dict[str, float], prefix: str = "train", **extra) -> None:
        """Write `prefix/name` scalars at `step` and a JSON line {"step", "kind": prefix, ...}."""
        if not self.enabled:
            return
        if self._writer is not None:
            with self._writer.as_default():
                for name, value in scalars.items():
                    write_scalar(f"{prefix}/{name}", value, step)
            self._writer.flush()
        if self._jsonl is not None:
            record = {"step": int(step), "kind": prefix, **{k: float(v) for k, v in scalars.items()}, **extra}
            self._jsonl.write(json.dumps(record, sort_keys=True) + "\n")
            self._jsonl.flush()

    def close(self) -> None:
        """Flush and close the files."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
