"""AdamW with global-norm clipping and a warmup + cosine learning-rate schedule, as a `tf.Module`.

Why not a Keras optimizer: the trainers must run on Keras 2 (TF 2.15, where Horovod builds) and on
Keras 3 (TF 2.21), and the two optimizer APIs differ in what matters here: how slots are created
(lazily, inside the first `apply_gradients`), how their variables are listed (`variables()` vs
`variables`), and how they are named in a checkpoint. This one creates its slots in `build()` before
the first step (so Horovod can broadcast them and a checkpoint can restore them), lists them in
`variables`, and checkpoints the same way under both.
"""

from __future__ import annotations

import math

import tensorflow as tf


class WarmupCosine:
    """lr(step) = peak * (step + 1) / warmup during warmup, then cosine decay to `min_ratio * peak`.

    A pure function of the step, so it needs no state of its own in a checkpoint. Example with
    peak=1e-3, warmup=2, total=6, min_ratio=0.1: steps 0..5 -> 5e-4, 1e-3, 1e-3, 7.75e-4, 3.25e-4, 1e-4.
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int, min_ratio: float = 0.1):
        if peak <= 0:
            raise ValueError(f"peak learning rate must be positive, got {peak}")
        if total_steps <= 0 or warmup_steps < 0:
            raise ValueError(f"need total_steps > 0 and warmup_steps >= 0, got {total_steps}, {warmup_steps}")
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_ratio = float(min_ratio)

    def __call__(self, step):
        """Learning rate (float32 tensor) for a 0-based step (int tensor or Python int)."""
        step = tf.cast(step, tf.float32)
        warm = float(max(self.warmup_steps, 1))
        decay_steps = float(max(self.total_steps - self.warmup_steps - 1, 1))
        progress = tf.clip_by_value((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
        cosine = self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + tf.cos(math.pi * progress))
        return self.peak * tf.where(step < self.warmup_steps, (step + 1.0) / warm, cosine)


class AdamW(tf.Module):
    """Adam with decoupled weight decay (Loshchilov & Hutter) on matrices only (rank >= 2).

    State: `iterations` (int64) and one first/second moment per variable, created by `build()`.
    """

    def __init__(self, learning_rate, beta_1: float = 0.9, beta_2: float = 0.95, epsilon: float = 1e-8,
                 weight_decay: float = 0.1, clip_norm: float | None = 1.0, name: str = "adamw"):
        super().__init__(name=name)
        self.learning_rate = learning_rate if callable(learning_rate) else (lambda _step: learning_rate)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.weight_decay = weight_decay
        self.clip_norm = clip_norm
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.m: list[tf.Variable] = []
        self.v: list[tf.Variable] = []
        self._built_for: int | None = None

    def build(self, var_list) -> None:
        """Create the moment slots (zeros) for `var_list`, in order (once; later calls check it)."""
        var_list = list(var_list)
        if self._built_for is not None:
            if self._built_for != len(var_list):
                raise ValueError("AdamW was built for a different variable list")
            return
        with tf.init_scope():  # eager even when first called inside a tf.function (SMP's first step)
            for i, var in enumerate(var_list):
                shape, dtype = tuple(int(d) for d in var.shape), tf.as_dtype(var.dtype)
                self.m.append(tf.Variable(tf.zeros(shape, dtype), trainable=False, name=f"m_{i}"))
                self.v.append(tf.Variable(tf.zeros(shape, dtype), trainable=False, name=f"v_{i}"))
        self._built_for = len(var_list)

    def current_learning_rate(self):
        """The learning rate the next `apply_gradients` will use."""
        return self.learning_rate(self.iterations)

    def apply_gradients(self, grads_and_vars):
        """One update; returns the global gradient norm before clipping (float32 scalar)."""
        grads, var_list = zip(*list(grads_and_vars), strict=True)
        if self._built_for is None:
            # Variables that exist only after the first step (SageMaker model parallelism builds the
            # partitioned model then) get their slots now; the data-parallel trainer builds first.
            self.build(var_list)
        if any(g is None for g in grads):
            missing = [getattr(v, "path", getattr(v, "name", "?"))
                       for g, v in zip(grads, var_list, strict=True) if g is None]
            raise ValueError(f"no gradient for {missing}: they do not influence the loss")
        grads = [tf.convert_to_tensor(g) for g in grads]
        norm = tf.linalg.global_norm(grads)
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm, use_norm=norm)
        lr = tf.cast(self.learning_rate(self.iterations), tf.float32)
        t = tf.cast(self.iterations + 1, tf.float32)
        bias_1 = 1.0 - tf.pow(self.beta_1, t)
        bias_2 = 1.0 - tf.pow(self.beta_2, t)
        for grad, var, m, v in zip(grads, var_list, self.m, self.v, strict=True):
            grad = tf.cast(grad, m.dtype)
            m.assign(self.beta_1 * m + (1.0 - self.beta_1) * grad)
            v.assign(self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad))
            update = (m / bias_1) / (tf.sqrt(v / bias_2) + self.epsilon)
            if self.weight_decay and len(var.shape) >= 2:
                update += self.weight_decay * var
            var.assign_sub(tf.cast(lr * update, var.dtype))
        self.iterations.assign_add(1)
        return norm

    @property
    def slot_variables(self) -> list[tf.Variable]:
        """Every state variable (iterations, moments), for broadcasting from rank 0."""
        return [self.iterations, *self.m, *self.v]
