"""Microbatches as SageMaker model parallelism (`smp.step`) handles them, without the library.

`smp.step` splits every tensor argument (also inside dicts, lists, tuples) along the batch axis into
`microbatches` equal parts, runs the decorated function once per part, and returns each tensor it
produced as a `StepOutput` holding one value per microbatch; the caller then reduces them:
`accumulate()` / `reduce_mean()` (mean: gradients, loss), `reduce_sum()`, `merge()` / `concat()`
(concatenate along the batch: predictions), `stack()`.

The real library also pipelines the microbatches across the model's partitions on different GPUs;
none of that changes the arithmetic, which is what this module reproduces so that the
model-parallel trainer's math can run and be tested anywhere (`trainers/smp_emulation.py`).

Example: a batch of 8 with microbatches=4 -> 4 parts of 2; a loss returned per part comes back as
StepOutput([l0, l1, l2, l3]) and `.reduce_mean()` is (l0 + l1 + l2 + l3) / 4.
"""

from __future__ import annotations

import tensorflow as tf


def check_microbatches(batch_size: int, microbatches: int) -> None:
    """The per-rank batch must split into equal microbatches (smp requires it)."""
    if microbatches < 1:
        raise ValueError(f"microbatches must be >= 1, got {microbatches}")
    if batch_size % microbatches:
        raise ValueError(
            f"the per-rank batch size {batch_size} does not split into {microbatches} microbatches: "
            f"use a --batch_size that is a multiple of {microbatches} (SageMaker model parallelism "
            f"splits every batch evenly; the reader already drops incomplete batches)"
        )


def split_microbatches(structure, microbatches: int, non_split: frozenset[str] = frozenset()):
    """Split every tensor in a (nested) structure along axis 0 -> list of `microbatches` structures.

    Args:
        structure: tensor, or dict/list/tuple of them (dict keys in `non_split` are not split).
        microbatches: number of parts.
        non_split: dict keys whose values go to every microbatch unchanged.

    Returns:
        A list with one structure per microbatch.
    """

    def split(value):
        if isinstance(value, dict):
            parts = {k: ([v] * microbatches if k in non_split else split(v)) for k, v in value.items()}
            return [{k: parts[k][i] for k in value} for i in range(microbatches)]
        if isinstance(value, (list, tuple)):
            parts = [split(v) for v in value]
            return [type(value)(p[i] for p in parts) for i in range(microbatches)]
        if value is None or not tf.is_tensor(value) and not hasattr(value, "shape"):
            return [value] * microbatches
        value = tf.convert_to_tensor(value)
        static = value.shape[0]
        if static is not None:
            check_microbatches(int(static), microbatches)
        return tf.split(value, microbatches, axis=0)

    return split(structure)


class StepOutput:
    """All microbatches' values of one tensor returned from a step (smp.StepOutput's API)."""

    def __init__(self, outputs):
        self.outputs = list(outputs)

    def reduce_mean(self):
        """Mean over microbatches (loss, gradients)."""
        return tf.add_n(self.outputs) / float(len(self.outputs))

    def reduce_sum(self):
        """Sum over microbatches."""
        return tf.add_n(self.outputs)

    def accumulate(self, method: str = "add_n", var=None):
        """Same value as `reduce_mean()` (the library accumulates as microbatches finish)."""
        del method, var
        return self.reduce_mean()

    def concat(self):
        """Concatenate along the batch axis."""
        return tf.concat(self.outputs, axis=0)

    def merge(self):
        """Concatenate along the batch axis (predictions)."""
        return self.concat()

    def stack(self):
        """Stack on a new leading axis."""
        return tf.stack(self.outputs)


def _pack(per_microbatch: list):
    """List (one per microbatch) of nested outputs -> one nested output with StepOutput leaves."""
    first = per_microbatch[0]
    if isinstance(first, dict):
        return {k: _pack([o[k] for o in per_microbatch]) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_pack([o[i] for o in per_microbatch]) for i in range(len(first)))
    if first is None:
        return None
    return StepOutput(per_microbatch)


def emulated_step(fn=None, *, microbatches: int = 1, non_split_inputs=(), **tf_function_kwargs):
    """Decorator with `smp.step`'s contract, run in this process: split, run per part, pack.

    Usable bare (`@emulated_step`) or with arguments (`@emulated_step(non_split_inputs=["x"])`),
    like `smp.step`. The decorated function is a `tf.function`, as under the library.
    """

    def decorate(func):
        import inspect

        traced = tf.function(func, **tf_function_kwargs)
        signature = inspect.signature(func)
        keep = frozenset(non_split_inputs)

        def wrapper(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            names = list(bound.arguments)
            parts = {n: ([bound.arguments[n]] * microbatches if n in keep
                         else split_microbatches(bound.arguments[n], microbatches)) for n in names}
            outputs = [traced(**{n: parts[n][i] for n in names}) for i in range(microbatches)]
            return _pack(outputs)

        wrapper.__wrapped__ = func
        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate
