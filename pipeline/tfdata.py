"""The tf.data reader's public entry point: `from pipeline import tfdata` (or `from pipeline.tfdata import ...`).

Importable with only TensorFlow, NumPy and fsspec (no Apache Beam, no SentencePiece). The reader
lives in pipeline/reader/ (plan: the global order; shards: access and checks; integrity: the one
error type; dataset: make_dataset); see pipeline/reader/dataset.py for how it is used. A document
store (a Megatron output) is packed when read: pipeline/reader/engine/doc_reader.py.
"""

from pipeline.format.mixture import Mixture, MixtureError, MixtureSource, load_mixture
from pipeline.reader.dataset import (
    DEFAULT_READ_BUFFER_BYTES,
    dp_from_horovod,
    dp_from_smp,
    make_dataset,
    mixture_state,
    steps_per_epoch,
)
from pipeline.reader.engine.doc_mixture import store_state
from pipeline.reader.engine.doc_plan import STORE_ORDER
from pipeline.reader.engine.doc_state import StoreStateError
from pipeline.reader.engine.mixture import MIXTURE_ORDER, MixtureOrder, open_order
from pipeline.reader.engine.plan import (
    DEFAULT_PARALLEL_READS,
    ORDER,
    GlobalOrder,
    RankPlan,
    batch_records,
    default_window,
    global_order,
    rank_plan,
    shard_order,
)
from pipeline.reader.integrity import ShardIntegrityError, integrity_error, shard_errors

__all__ = [
    "DEFAULT_PARALLEL_READS",
    "DEFAULT_READ_BUFFER_BYTES",
    "MIXTURE_ORDER",
    "ORDER",
    "GlobalOrder",
    "Mixture",
    "MixtureError",
    "MixtureOrder",
    "MixtureSource",
    "RankPlan",
    "STORE_ORDER",
    "ShardIntegrityError",
    "StoreStateError",
    "batch_records",
    "default_window",
    "dp_from_horovod",
    "dp_from_smp",
    "global_order",
    "integrity_error",
    "load_mixture",
    "make_dataset",
    "mixture_state",
    "open_order",
    "rank_plan",
    "shard_errors",
    "shard_order",
    "steps_per_epoch",
    "store_state",
]
