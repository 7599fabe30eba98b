"""What a reader is asked for, checked once: ranks and batch sizes, seed, start, features, reading options.

`read_request(...)` turns `make_dataset`'s keyword arguments into one frozen `ReadRequest`, refusing
bad usage with a ValueError that names the argument; the readers (one output, a mixture, a document
store) take the request instead of a dozen loose values. No TensorFlow here: an `input_context` is
read by its attributes, so the PyTorch reader shares these checks.
"""

from __future__ import annotations

import dataclasses

from pipeline.format import records
from pipeline.reader.engine.plan import DEFAULT_PARALLEL_READS

OPTIONAL_FEATURES = (records.SEGMENT_IDS, records.POSITIONS)
DEFAULT_READ_BUFFER_BYTES = 8 << 20  # large sequential reads: few round trips on EFS / NFS


@dataclasses.dataclass(frozen=True)
class ReadRequest:
    """The arguments of one reader, checked (see `make_dataset` for each one's meaning).

    Attributes:
        rank_batch: records (sequences) this rank reads per global step.
        element_batch: records per element: rank_batch, or one replica's with `input_context`.
        dp_rank: this rank (the input pipeline's id with `input_context`).
        dp_size: number of ranks (input pipelines).
        from_context: whether the ranks came from a tf.distribute input context.
    """

    rank_batch: int
    element_batch: int
    dp_rank: int
    dp_size: int
    from_context: bool = False
    seed: int | None = None
    shuffle: bool = True
    epoch: int = 0
    start_step: int = 0
    num_epochs: int | None = 1
    shuffle_buffer: int | None = None
    verify: bool = False
    features: tuple[str, ...] | None = None
    keras: bool = False
    num_parallel_reads: int = DEFAULT_PARALLEL_READS
    read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES
    cache_dir: str | None = None
    num_steps: int | None = None
    state: dict | None = None

    @property
    def global_batch(self) -> int:
        """Records per global step, over all ranks."""
        return self.rank_batch * self.dp_size

    @property
    def sharded(self) -> bool:
        """Whether each rank reads only its slice (so a tf.distribute strategy must not shard again)."""
        return self.dp_size > 1 or self.from_context


def batch_sizes(batch_size, global_batch_size, dp_rank, dp_size, input_context) -> tuple[int, int, int, int]:
    """(records per rank and batch, records per element, dp_rank, dp_size) from the arguments."""
    if input_context is not None:
        if dp_rank != 0 or dp_size != 1:
            raise ValueError("pass either input_context or dp_rank/dp_size, not both")
        pipelines, replicas = input_context.num_input_pipelines, input_context.num_replicas_in_sync
        if replicas % pipelines:
            raise ValueError(f"{replicas} replicas do not split evenly over {pipelines} input pipelines")
        if (batch_size is None) == (global_batch_size is None):
            raise ValueError("pass global_batch_size (or batch_size per replica) with input_context")
        if global_batch_size is not None:
            per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        else:
            per_replica = int(batch_size)
        local = replicas // pipelines
        return per_replica * local, per_replica, input_context.input_pipeline_id, pipelines
    if (batch_size is None) == (global_batch_size is None):
        raise ValueError("pass batch_size (per rank) or global_batch_size, one of them")
    if dp_size < 1 or not 0 <= dp_rank < dp_size:
        raise ValueError(f"dp_rank {dp_rank} must be in [0, dp_size={dp_size})")
    if global_batch_size is not None:
        if global_batch_size < 1 or global_batch_size % dp_size:
            raise ValueError(f"global_batch_size {global_batch_size} is not a positive multiple of dp_size {dp_size}")
        rank_batch = global_batch_size // dp_size
    else:
        rank_batch = int(batch_size)
    if rank_batch < 1:
        raise ValueError(f"batch_size {rank_batch} must be >= 1")
    return rank_batch, rank_batch, dp_rank, dp_size


def read_request(batch_size=None, global_batch_size=None, dp_rank=0, dp_size=1, input_context=None, *,
                 seed=None, shuffle=True, epoch=0, start_step=0, num_epochs=1, shuffle_buffer=None,
                 num_parallel_reads=DEFAULT_PARALLEL_READS, **options) -> ReadRequest:
    """The checked request for `make_dataset`'s arguments (the rest of `options` are taken as given).

    Raises:
        ValueError: on invalid arguments, including `shuffle=True` without a seed.
    """
    if shuffle and seed is None:
        raise ValueError(
            "shuffle=True needs a seed (the order must be the same on every rank and on resumption); "
            "pass seed=<int>, or shuffle=False to read in manifest order."
        )
    if seed is not None and not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed {seed} must be an integer in [0, 2**64)")
    rank_batch, element_batch, dp_rank, dp_size = batch_sizes(
        batch_size, global_batch_size, dp_rank, dp_size, input_context)
    if epoch < 0 or start_step < 0:
        raise ValueError(f"epoch ({epoch}) and start_step ({start_step}) must be >= 0")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs {num_epochs} must be >= 1, or None to repeat forever")
    if (shuffle_buffer is not None and shuffle_buffer < 1) or num_parallel_reads < 1:
        raise ValueError("shuffle_buffer and num_parallel_reads must be >= 1")
    features = options.pop("features", None)
    return ReadRequest(rank_batch, element_batch, dp_rank, dp_size, input_context is not None, seed=seed,
                       shuffle=shuffle, epoch=epoch, start_step=start_step, num_epochs=num_epochs,
                       shuffle_buffer=shuffle_buffer, num_parallel_reads=num_parallel_reads,
                       features=None if features is None else tuple(features), **options)


def select_features(features, declared: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The optional features to return: those asked for (each must be declared), or all declared ones."""
    if features is None:
        return declared
    optional = tuple(features)
    unknown = [f for f in optional if f not in OPTIONAL_FEATURES]
    absent = [f for f in optional if f not in declared]
    if unknown or absent:
        raise ValueError(
            f"features {optional!r}: choose from {OPTIONAL_FEATURES} among those {where} declares "
            f"({declared}); write them with document boundaries enabled"
        )
    return optional
