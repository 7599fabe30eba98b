"""The tf.data reader's public entry point: `from pipeline import tfdata` (or `from pipeline.tfdata import ...`).

Importable with only TensorFlow, NumPy and fsspec (no Apache Beam, no SentencePiece). The reader
lives in pipeline/reader/ (plan, shards, dataset); see pipeline/reader/dataset.py for how an epoch
is laid out, resumed and checked.
"""

from pipeline.reader.dataset import (
    DEFAULT_READ_BUFFER_BYTES,
    dp_from_horovod,
    dp_from_smp,
    make_dataset,
    steps_per_epoch,
)
from pipeline.reader.plan import DEFAULT_PARALLEL_READS, EpochPlan, default_window, plan_epoch, shard_order
from pipeline.reader.shards import ShardIntegrityError

__all__ = [
    "DEFAULT_PARALLEL_READS",
    "DEFAULT_READ_BUFFER_BYTES",
    "EpochPlan",
    "ShardIntegrityError",
    "default_window",
    "dp_from_horovod",
    "dp_from_smp",
    "make_dataset",
    "plan_epoch",
    "shard_order",
    "steps_per_epoch",
]
