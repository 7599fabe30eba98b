"""A one-process stand-in for the part of `smdistributed.modelparallel.tensorflow` the trainer uses.

NOT SageMaker model parallelism: there is one partition and one data-parallel rank, no pipelining
and no GPU placement. It exists so that trainers/train_smp.py, written to the library's API, can run
end to end on any machine (`--smp_emulation`) and in tests: the model, the data sharding by
`dp_rank()`/`dp_size()`, the microbatch splitting and accumulation (trainers/microbatch.py), the
metrics and the checkpoints are exercised; what only the library does is not.

Names mirror the library's: init, rank, size, local_rank, local_size, dp_rank, dp_size, mp_rank,
mp_size, num_microbatches, step, DistributedModel, CheckpointManager, barrier, dp_barrier,
mp_barrier, StepOutput.
"""

from __future__ import annotations

import tensorflow as tf

from trainers.microbatch import StepOutput, emulated_step

__all__ = [
    "CheckpointManager",
    "DistributedModel",
    "StepOutput",
    "barrier",
    "dp_barrier",
    "dp_rank",
    "dp_size",
    "init",
    "local_rank",
    "local_size",
    "mp_barrier",
    "mp_rank",
    "mp_size",
    "num_microbatches",
    "rank",
    "size",
    "step",
]

EMULATED = True  # the real library has no such attribute
_state = {"microbatches": 1, "initialized": False}


def init(microbatches: int = 1) -> None:
    """Start the emulation (the library reads its parameters from SageMaker's launch instead)."""
    _state["microbatches"] = int(microbatches)
    _state["initialized"] = True


def _check() -> None:
    if not _state["initialized"]:
        raise RuntimeError("smp.init() must be called first")


def rank() -> int:
    """Global rank."""
    _check()
    return 0


def size() -> int:
    """Number of processes."""
    _check()
    return 1


def local_rank() -> int:
    """Rank on this machine."""
    return rank()


def local_size() -> int:
    """Processes on this machine."""
    return size()


def dp_rank() -> int:
    """Rank inside the data-parallel group (what the reader shards by)."""
    return rank()


def dp_size() -> int:
    """Number of model replicas."""
    return size()


def mp_rank() -> int:
    """Partition index of this process."""
    return rank()


def mp_size() -> int:
    """Number of partitions."""
    return size()


def num_microbatches() -> int:
    """Microbatches per step."""
    _check()
    return _state["microbatches"]


def step(fn=None, *, non_split_inputs=(), input_split_axes=None, **tf_function_kwargs):
    """`@smp.step`: split tensor arguments into microbatches, run each, return StepOutputs."""
    if input_split_axes:
        raise NotImplementedError("the emulation splits along axis 0 only")

    def decorate(func):
        return emulated_step(func, microbatches=num_microbatches(), non_split_inputs=non_split_inputs,
                             **tf_function_kwargs)

    return decorate(fn) if fn is not None else decorate


class DistributedModel(tf.keras.Model):
    """The library's base class for the model to partition; here a plain Keras model."""


class CheckpointManager(tf.train.CheckpointManager):
    """`smp.CheckpointManager(checkpoint, directory, max_to_keep, checkpoint_name)`."""

    def __init__(self, checkpoint, directory="/opt/ml/checkpoints", max_to_keep=None, checkpoint_name="ckpt"):
        super().__init__(checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name=checkpoint_name)

    def restore(self):
        """Restore the latest checkpoint in the directory (a no-op when there is none)."""
        if self.latest_checkpoint:
            return self.checkpoint.restore(self.latest_checkpoint)
        return None


def barrier(group=None) -> None:
    """Wait for every process (one process: returns)."""


def dp_barrier() -> None:
    """Wait for the data-parallel group."""


def mp_barrier() -> None:
    """Wait for the model-parallel group."""
