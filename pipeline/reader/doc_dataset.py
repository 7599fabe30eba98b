"""make_dataset for a document store: read-time packing (pipeline/reader/engine/doc_reader.py) as a tf.data dataset.

The graph: a generator of the rank's chunks of steps (the order, computed in Python once per
window; each chunk's plan kept aside under a key) -> a parallel, deterministic map that fills each
chunk from the store in NumPy (`num_parallel_reads` chunks in flight, in order), in the store's
dtype -> in TensorFlow: tokens widened to int32, inputs and labels cut, the loss mask made -> one
element per batch, a slice of its chunk's arrays -> the same finish as the TFRecord readers
(replica batches for tf.distribute, the Keras form, the options). The batches are `StoreReader`'s,
so the PyTorch reader (pipeline/pytorch.py) gives the same ones.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import tensorflow as tf

from pipeline.format.mixture import Mixture
from pipeline.reader.engine.doc_mixture import open_reader
from pipeline.reader.engine.doc_reader import StoreSettings
from pipeline.reader.engine.request import ReadRequest
from pipeline.reader.graph import UNKNOWN, finish, no_autograph

_KEYS = itertools.count()


def store_dataset(location, request: ReadRequest, *, seq_len: int | None, packing: str | None,
                  pack_window: int | None, schedule) -> tf.data.Dataset:
    """make_dataset for a document store, or a `Mixture` of stores (see make_dataset's arguments)."""
    if seq_len is None:
        where = getattr(location, "description", location)
        raise ValueError(f"{where}: a document store is packed when read: pass seq_len (and packing: concat "
                         "or best_fit)")
    r = request
    if schedule and r.from_context:
        raise ValueError("a schedule with input_context: pass dp_rank/dp_size instead (each replica's batch would "
                         "change with the global batch)")
    settings = StoreSettings(
        global_batch_size=r.global_batch, seq_len=seq_len, packing=packing or "concat", seed=r.seed,
        shuffle=r.shuffle, epoch=r.epoch, start_step=r.start_step, num_epochs=r.num_epochs, num_steps=r.num_steps,
        shuffle_buffer=r.shuffle_buffer, **({"pack_window": pack_window} if pack_window is not None else {}),
        schedule=schedule, state=r.state, verify=r.verify, features=r.features)
    reader = open_reader(location, settings, r.dp_rank, r.dp_size)
    raw_names = ("tokens", "used", *reader.features)
    token_dtype = tf.as_dtype(reader.token_dtype.newbyteorder("="))
    segments = getattr(reader.order, "segments", ())  # a mixture's are fixed
    batch = r.rank_batch if len({s.global_batch for s in segments}) <= 1 else None
    length = seq_len if len({s.seq_len for s in segments}) <= 1 else None
    seg_dtype = tf.uint16 if max([seq_len] + [s.seq_len for s in segments]) <= 65535 else tf.int32
    dtypes = {"tokens": token_dtype, "used": tf.int64, "segment_ids": seg_dtype, "positions": seg_dtype}
    plans: dict[int, tuple] = {}
    lock = threading.Lock()

    def windows():
        for window, _, seqs in reader.plans():
            key = next(_KEYS)
            with lock:
                plans[key] = (window, seqs)
            yield key

    def fill(key: np.ndarray) -> list[np.ndarray]:
        with lock:
            window, seqs = plans.pop(int(key))
        raw = reader.fill_raw(window, seqs)
        return [raw[name].astype(dtypes[name].as_numpy_dtype, copy=False) for name in raw_names]

    @no_autograph
    def window_arrays(key):
        # The store's tokens widened, inputs and labels cut, the loss mask made here, in TensorFlow's threads.
        raw = dict(zip(raw_names, tf.numpy_function(fill, [key], [dtypes[n] for n in raw_names], stateful=True),
                       strict=True))
        tokens = tf.cast(tf.ensure_shape(raw["tokens"], [None, batch, None if length is None else length + 1]),
                         tf.int32)
        used = tf.ensure_shape(raw["used"], [None, batch])
        out = {"inputs": tokens[..., :-1], "labels": tokens[..., 1:],
               "loss_mask": tf.cast(tf.sequence_mask(used, tf.shape(tokens)[-1] - 1), tf.float32)}
        for name in reader.features:
            out[name] = tf.cast(tf.ensure_shape(raw[name], [None, batch, length]), tf.int32)
        return out

    ds = tf.data.Dataset.from_generator(windows, output_signature=tf.TensorSpec([], tf.int64))
    ds = ds.map(window_arrays, num_parallel_calls=r.num_parallel_reads, deterministic=True)
    ds = ds.flat_map(tf.data.Dataset.from_tensor_slices)
    finite = r.num_epochs is not None and not isinstance(location, Mixture)  # a mixture has no epoch of its own
    total = r.num_steps if r.num_steps is not None else (UNKNOWN if finite else None)
    return finish(ds, r.rank_batch, r.element_batch, r.keras, total, r.sharded)
