"""Training state and its checkpoints: model + optimizer (moments, iteration count) + progress.

Progress is the global step and the data position (epoch, step in epoch), plus the data signature
(trainers/data.py) of the run that wrote it, so that a resume can be refused when the data order
differs. `Checkpointer` is the data-parallel trainer's: files are touched on rank 0 only
(Horovod's step 6). The model-parallel trainer keeps `Progress` and checkpoints with
`smp.CheckpointManager` instead (one writer per partition).
"""

from __future__ import annotations

import tensorflow as tf


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
