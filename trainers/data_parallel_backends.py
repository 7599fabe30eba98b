"""Data-parallel backends with one shape: Horovod, SageMaker's data-parallel library, or none.

`smdistributed.dataparallel.tensorflow` was designed as a drop-in for Horovod's TF API (`init`,
`rank`, `size`, `local_rank`, `DistributedGradientTape`, `broadcast_variables`), so one trainer
serves both; the only difference that matters here is that its general all-reduce for
non-gradient tensors is `oob_allreduce` (average only). `smdistributed` exists only inside
SageMaker's training containers.

Each backend gives: rank/size/local_rank, `pin_gpu()` (one GPU per local rank), `wrap_tape()`,
`broadcast()` of variables from rank 0, and `allreduce_mean()` for metrics and token counts.
"""

from __future__ import annotations

import tensorflow as tf


class LocalBackend:
    """One process, no communication (unit tests, single-GPU runs)."""

    name = "local"

    def rank(self) -> int:
        """Global rank of this process."""
        return 0

    def size(self) -> int:
        """Number of data-parallel processes."""
        return 1

    def local_rank(self) -> int:
        """Rank among the processes on this machine (selects the GPU)."""
        return 0

    @property
    def is_chief(self) -> bool:
        """Rank 0: the one process that logs and writes checkpoints."""
        return self.rank() == 0

    def pin_gpu(self) -> None:
        """Make only the GPU of this process's local rank visible (no-op without GPUs)."""
        gpus = tf.config.list_physical_devices("GPU")
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        if gpus:
            tf.config.set_visible_devices(gpus[self.local_rank() % len(gpus)], "GPU")

    def wrap_tape(self, tape):
        """The tape whose `gradient()` returns gradients averaged over ranks."""
        return tape

    def broadcast(self, variables) -> None:
        """Overwrite `variables` on every rank with rank 0's values."""

    def allreduce_mean(self, tensor):
        """Mean of `tensor` over ranks (works inside tf.function)."""
        return tf.identity(tensor)

    def allreduce_sum(self, tensor):
        """Sum of `tensor` over ranks."""
        return self.allreduce_mean(tensor) * tf.cast(self.size(), tf.as_dtype(tensor.dtype))

    def barrier(self) -> None:
        """Wait for every rank."""

    def shutdown(self) -> None:
        """Release the communication library."""


class HorovodBackend(LocalBackend):
    """`horovod.tensorflow` (MPI or Gloo; `horovodrun -np N --gloo` on CPU)."""

    name = "horovod"

    def __init__(self, num_groups: int = 0):
        self.num_groups = num_groups  # 0: one all-reduce per gradient (overlaps the backward pass)
        try:
            import horovod.tensorflow as hvd
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise SystemExit(
                "horovod.tensorflow is not importable. Horovod 0.28.1 builds against TensorFlow "
                "<= 2.15: create its environment with `bash scripts/setup_horovod_env.sh` and run "
                f"this script with .venv-hvd/bin/horovodrun ({e})"
            ) from e
        self.hvd = hvd
        hvd.init()  # Horovod (step 1): initialize

    def rank(self) -> int:
        """Global rank of this process."""
        return self.hvd.rank()

    def size(self) -> int:
        """Number of data-parallel processes."""
        return self.hvd.size()

    def local_rank(self) -> int:
        """Rank among the processes on this machine."""
        return self.hvd.local_rank()

    def wrap_tape(self, tape):
        """Horovod (step 4): all-reduce (average) the gradients.

        sparse_as_dense: the token embedding's gradient is an IndexedSlices (a gather's gradient);
        densified it is all-reduced like the others instead of all-gathered (which costs memory
        and time growing with the number of ranks). num_groups=1 puts every gradient in one grouped
        all-reduce: much faster to trace (one op instead of one per gradient) but it waits for the
        whole backward pass; the default 0 overlaps communication.
        """
        return self.hvd.DistributedGradientTape(tape, sparse_as_dense=True, num_groups=self.num_groups)

    def broadcast(self, variables) -> None:
        """Horovod (step 5): rank 0's values everywhere."""
        self.hvd.broadcast_variables(list(variables), root_rank=0)

    def allreduce_mean(self, tensor):
        """Mean over ranks."""
        return self.hvd.allreduce(tensor, op=self.hvd.Average)

    def allreduce_sum(self, tensor):
        """Sum over ranks."""
        return self.hvd.allreduce(tensor, op=self.hvd.Sum)

    def barrier(self) -> None:
        """Wait for every rank (a tiny all-reduce: works on every Horovod version)."""
        self.hvd.allreduce(tf.constant(0.0), op=self.hvd.Sum, name="barrier")

    def shutdown(self) -> None:
        """Nothing: Horovod shuts itself down at exit.

        An explicit hvd.shutdown() after training can wait long on rank 0 with Gloo on CPU; the
        shutdown at exit does not.
        """


class SMDataParallelBackend(LocalBackend):
    """SageMaker's data-parallel library (`smdistributed.dataparallel.tensorflow`).

    Only inside SageMaker's TensorFlow training containers on supported GPU instances
    (ml.p3.16xlarge, ml.p3dn.24xlarge, ml.p4d.24xlarge); the launcher enables it with
    `distribution={"smdistributed": {"dataparallel": {"enabled": True}}}`.
    """

    name = "smddp"

    def __init__(self):
        try:
            import smdistributed.dataparallel.tensorflow as sdp
        except ImportError as e:
            raise SystemExit(
                "smdistributed.dataparallel.tensorflow is not importable: SageMaker's data-parallel "
                "library exists only inside SageMaker's TensorFlow training containers. Launch with "
                "`python -m trainers.launch_sagemaker --trainer smddp ...`, or use --backend horovod "
                f"elsewhere ({e})"
            ) from e
        self.sdp = sdp
        sdp.init()

    def rank(self) -> int:
        """Global rank of this process."""
        return self.sdp.rank()

    def size(self) -> int:
        """Number of data-parallel processes."""
        return self.sdp.size()

    def local_rank(self) -> int:
        """Rank among the processes on this machine."""
        return self.sdp.local_rank()

    def wrap_tape(self, tape):
        """All-reduce (average) the gradients."""
        return self.sdp.DistributedGradientTape(tape)

    def broadcast(self, variables) -> None:
        """Rank 0's values everywhere."""
        self.sdp.broadcast_variables(list(variables), root_rank=0)

    def allreduce_mean(self, tensor):
        """Mean over ranks: the library's `allreduce` is reserved for gradients, so use the oob one."""
        return self.sdp.oob_allreduce(tensor)

    def barrier(self) -> None:
        """Wait for every rank."""
        self.sdp.oob_allreduce(tf.constant(0.0))


def make_backend(name: str, hvd_num_groups: int = 0) -> LocalBackend:
    """The backend called `name`: horovod, smddp, local, or auto.

    auto: smddp inside SageMaker when importable, else horovod when importable, else local.
    """
    if name == "auto":
        import importlib.util

        if importlib.util.find_spec("smdistributed") is not None:
            try:
                return SMDataParallelBackend()
            except SystemExit:
                pass
        name = "horovod" if importlib.util.find_spec("horovod") is not None else "local"
    if name == "horovod":
        return HorovodBackend(num_groups=hvd_num_groups)
    if name == "smddp":
        return SMDataParallelBackend()
    if name == "local":
        return LocalBackend()
    raise ValueError(f"unknown backend {name!r}: horovod, smddp, local or auto")
