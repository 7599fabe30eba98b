"""What a reader is asked for, checked once: ranks and batch sizes, seed, start, features, reading options.

`read_request(...)` turns `make_dataset`'s keyword arguments into one frozen `ReadRequest`, refusing
bad usage with a ValueError that names the argument; the readers (one output, a mixture, a document
store) take the request instead of a dozen loose values. No TensorFlow here: an `input_context` is
read by its attributes, so the PyTorch reader shares these checks.

Every count and size is an integer (not a bool, a float or a string: ``seq_len=64.7`` would be cut
to 64, ``True`` taken as 1) within a physical limit, checked by `integer` before anything is
allocated: a sequence holds at most MAX_SEQ_LEN labels, a global step MAX_STEP_LABELS (global batch
x seq_len: the rank's arrays are allocated whole), a window MAX_WINDOW_LABELS (a rank holds its
share of a window, and the order lays the whole window out), a best_fit packing window
MAX_PACK_WINDOW documents; steps and epochs stay below MAX_STEPS and MAX_EPOCHS, so that a
stream's label count (steps x labels per step) fits in int64.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.format import records
from pipeline.reader.engine.plan import DEFAULT_PARALLEL_READS

OPTIONAL_FEATURES = (records.SEGMENT_IDS, records.POSITIONS)
DEFAULT_READ_BUFFER_BYTES = 8 << 20  # large sequential reads: few round trips on EFS / NFS

MAX_SEQ_LEN = 1 << 20  # labels per sequence
MAX_STEP_LABELS = 1 << 30  # labels per global step (global batch x seq_len)
MAX_WINDOW_LABELS = 1 << 31  # labels per window of the order (shuffle_buffer x seq_len)
MAX_PACK_WINDOW = 1 << 22  # documents per best_fit packing window
MAX_STEPS = 1 << 32  # steps x MAX_STEP_LABELS < 2**63: a label count fits in int64
MAX_EPOCHS = 1 << 32
MAX_PARALLEL_READS = 256  # pieces (or chunks) in flight per rank
MAX_READ_BUFFER_BYTES = 1 << 30
SEED_LIMIT = 1 << 64


def integer(name: str, value, lo: int, hi: int, *, optional: bool = False, error=ValueError) -> int | None:
    """`value` as an int within [lo, hi], or an `error` naming the argument (None passes with `optional`).

    A bool, a float or a string is refused, not converted: ``seq_len=64.7`` or ``"64"`` is a
    mistake to name, not a value to round.
    """
    if value is None and optional:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise error(f"{name} {value!r}: must be an integer in [{lo}, {hi}]"
                    + (" (or None)" if optional else ""))
    if not lo <= int(value) <= hi:
        raise error(f"{name} {int(value)} is outside [{lo}, {hi}]" + (" (or None)" if optional else ""))
    return int(value)


def boolean(name: str, value) -> bool:
    """`value` as a bool, or a ValueError naming the argument (a string such as "false" is truthy)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} {value!r}: must be True or False")
    return bool(value)


def check_step_sizes(where: str, global_batch: int, seq_len: int, shuffle_buffer: int | None) -> None:
    """Refuse a global step of more than MAX_STEP_LABELS labels, a window of more than MAX_WINDOW_LABELS."""
    if global_batch * seq_len > MAX_STEP_LABELS:
        raise ValueError(f"{where}: global batch {global_batch} x seq_len {seq_len}: a global step of more than "
                         f"{MAX_STEP_LABELS} labels")
    if shuffle_buffer is not None and shuffle_buffer * seq_len > MAX_WINDOW_LABELS:
        raise ValueError(f"{where}: shuffle_buffer {shuffle_buffer} x seq_len {seq_len}: a window of more than "
                         f"{MAX_WINDOW_LABELS} labels")


def check_ranks(dp_rank, dp_size) -> tuple[int, int]:
    """(dp_rank, dp_size) as ints, dp_size >= 1 and 0 <= dp_rank < dp_size."""
    size = integer("dp_size", dp_size, 1, MAX_STEP_LABELS)
    rank = integer("dp_rank", dp_rank, 0, size - 1)
    return rank, size


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
            per_replica = input_context.get_per_replica_batch_size(
                integer("global_batch_size", global_batch_size, 1, MAX_STEP_LABELS))
        else:
            per_replica = integer("batch_size", batch_size, 1, MAX_STEP_LABELS)
        local = replicas // pipelines
        return per_replica * local, per_replica, input_context.input_pipeline_id, pipelines
    if (batch_size is None) == (global_batch_size is None):
        raise ValueError("pass batch_size (per rank) or global_batch_size, one of them")
    dp_rank, dp_size = check_ranks(dp_rank, dp_size)
    if global_batch_size is not None:
        global_batch_size = integer("global_batch_size", global_batch_size, 1, MAX_STEP_LABELS)
        if global_batch_size % dp_size:
            raise ValueError(f"global_batch_size {global_batch_size} is not a positive multiple of dp_size {dp_size}")
        rank_batch = global_batch_size // dp_size
    else:
        rank_batch = integer("batch_size", batch_size, 1, MAX_STEP_LABELS // dp_size)
    return rank_batch, rank_batch, dp_rank, dp_size


def read_request(batch_size=None, global_batch_size=None, dp_rank=0, dp_size=1, input_context=None, *,
                 seed=None, shuffle=True, epoch=0, start_step=0, num_epochs=1, shuffle_buffer=None,
                 num_parallel_reads=DEFAULT_PARALLEL_READS, **options) -> ReadRequest:
    """The checked request for `make_dataset`'s arguments (the rest of `options` are taken as given).

    Raises:
        ValueError: on invalid arguments, including `shuffle=True` without a seed.
    """
    shuffle = boolean("shuffle", shuffle)
    seed = integer("seed", seed, 0, SEED_LIMIT - 1, optional=True)
    if shuffle and seed is None:
        raise ValueError(
            "shuffle=True needs a seed (the order must be the same on every rank and on resumption); "
            "pass seed=<int>, or shuffle=False to read in manifest order."
        )
    rank_batch, element_batch, dp_rank, dp_size = batch_sizes(
        batch_size, global_batch_size, dp_rank, dp_size, input_context)
    epoch = integer("epoch", epoch, 0, MAX_EPOCHS)
    start_step = integer("start_step", start_step, 0, MAX_STEPS)
    num_epochs = integer("num_epochs", num_epochs, 1, MAX_EPOCHS, optional=True)
    shuffle_buffer = integer("shuffle_buffer", shuffle_buffer, 1, MAX_WINDOW_LABELS, optional=True)
    num_parallel_reads = integer("num_parallel_reads", num_parallel_reads, 1, MAX_PARALLEL_READS)
    for name in ("verify", "keras"):
        if name in options:
            options[name] = boolean(name, options[name])
    if "read_buffer_bytes" in options:
        options["read_buffer_bytes"] = integer("read_buffer_bytes", options["read_buffer_bytes"], 1,
                                               MAX_READ_BUFFER_BYTES)
    if "num_steps" in options:
        options["num_steps"] = integer("num_steps", options["num_steps"], 1, MAX_STEPS, optional=True)
    features = feature_names(options.pop("features", None))
    return ReadRequest(rank_batch, element_batch, dp_rank, dp_size, input_context is not None, seed=seed,
                       shuffle=shuffle, epoch=epoch, start_step=start_step, num_epochs=num_epochs,
                       shuffle_buffer=shuffle_buffer, num_parallel_reads=num_parallel_reads,
                       features=features, **options)


def feature_names(features) -> tuple[str, ...] | None:
    """`features` as a tuple of names (None: the declared ones); a lone string is refused, not split."""
    if features is None:
        return None
    if isinstance(features, str) or not all(isinstance(f, str) for f in features):
        raise ValueError(f"features {features!r}: a list of names among {OPTIONAL_FEATURES}, or None")
    return tuple(features)


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
