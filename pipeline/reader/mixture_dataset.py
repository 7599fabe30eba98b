"""make_dataset for a mixture of TFRecord outputs: the shared graph, fed window by window from the mixture's order.

The order (which source and which of its records fill each position of global batch k) is
pipeline/reader/engine/mixture.py; here every source is checked before step 0 and the rank's reads of each
window become the pieces of the graph in pipeline/reader/graph.py.
"""

from __future__ import annotations

import concurrent.futures
import logging
import types

import numpy as np
import tensorflow as tf

from pipeline.format import records
from pipeline.format.mixture import Mixture
from pipeline.reader.doc_dataset import store_dataset
from pipeline.reader.engine.doc_mixture import is_store_mixture
from pipeline.reader.engine.mixture import MixtureOrder, open_order
from pipeline.reader.engine.plan import default_window
from pipeline.reader.engine.request import OPTIONAL_FEATURES, ReadRequest, check_step_sizes, select_features
from pipeline.reader.graph import ENDS_WINDOW, PIECE_FIELDS, finish, no_autograph, parse_spec, window_pipeline
from pipeline.reader.shards import DTYPES, check_checksums, check_sizes, load_source, locate_records

log = logging.getLogger(__name__)


def _mixture_sources(mixture: Mixture, verify: bool) -> list:
    """Every source's shards, checked before step 0 (sizes, record layout, optionally checksums).

    The sources are checked concurrently (each is a directory listing and a few small reads, round
    trips on remote storage); the first failing source, in the mixture's order, raises.
    """

    def checked(entry):
        source = load_source(entry.manifest)
        check_sizes(source)
        source = locate_records(source)
        if verify:
            check_checksums(source)
        return source

    with concurrent.futures.ThreadPoolExecutor(min(8, len(mixture.sources))) as pool:
        return list(pool.map(checked, mixture.sources))


def mixture_state(mixture, global_batch_size: int, step: int, *, seed: int | None = None, shuffle: bool = True,
                  shuffle_buffer: int | None = None, state: dict | None = None) -> dict:
    """The state of a mixture's order after `step` global steps: save it beside the checkpoint of step k.

    Pass the reader's settings; `state` (the one saved at an earlier step) avoids recomputing the
    blend from step 0. Resume with `make_dataset(mixture, ..., state=<this>)`, on any number of ranks.
    """
    order = open_order(mixture, global_batch_size, seed=seed, shuffle=shuffle, shuffle_buffer=shuffle_buffer,
                       state=state)
    if step < order.start_step:
        raise ValueError(f"step {step} is before the given state's step {order.start_step}")
    return order.state(step)


def mixture_dataset(mixture: Mixture, request: ReadRequest, **store_options) -> tf.data.Dataset:
    """make_dataset for a mixture: the same graph, fed window by window from the mixture's order."""
    if is_store_mixture(mixture):  # document stores, packed when read
        return store_dataset(mixture, request, **store_options)
    given = [k for k, v in store_options.items() if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: for document stores; this mixture's sources are TFRecord outputs")
    r = request
    rank_batch, dp_rank, dp_size, seed, state = r.rank_batch, r.dp_rank, r.dp_size, r.seed, r.state
    num_steps, start_step = r.num_steps, r.start_step
    if num_steps is not None and num_steps < 1:
        raise ValueError(f"num_steps {num_steps} must be >= 1, or None to repeat forever")
    if state is not None and start_step:
        raise ValueError("pass state (it holds the step) or start_step, not both")
    sources = _mixture_sources(mixture, r.verify)
    declared = tuple(f for f in OPTIONAL_FEATURES if all(f in s.optional for s in sources))
    optional = select_features(r.features, declared, "every source of the mixture")
    first = sources[0]
    global_batch = rank_batch * dp_size
    check_step_sizes(f"mixture {mixture.description}", global_batch, first.seq_len, r.shuffle_buffer)
    window = r.shuffle_buffer or default_window(first.seq_len, 2 if first.token_dtype == "uint16" else 4)
    order = MixtureOrder(mixture.names, [s.counts for s in sources], mixture.schedule, global_batch, seed=seed,
                         shuffle=r.shuffle, window_steps=max(1, window // global_batch), state=state)
    start = order.start_step if state is not None else int(start_step)
    steps_per_window = order.window_steps
    first_window = start // steps_per_window
    last_window = tf.int64.max if num_steps is None else -(-(start + num_steps) // steps_per_window)
    shard_base = np.cumsum([0] + [len(s.urls) for s in sources])
    all_urls = tuple(u for s in sources for u in s.urls)
    layouts = [s.layout for s in sources]
    seq_len, tf_dtype = first.seq_len, DTYPES[first.token_dtype]
    packings = {s.packing for s in sources}
    if len(packings) > 1:
        raise ValueError(f"mixture {mixture.description}: its sources are packed in different ways "
                         f"({', '.join(sorted(packings))}); mix outputs of one --packing mode")
    best_fit = first.packing == records.BEST_FIT
    widths, spec = parse_spec(seq_len, optional, best_fit)
    gathers: dict[int, np.ndarray] = {}

    def plan_window(w: np.ndarray) -> np.ndarray:
        # The window's pieces: int64 [k, len(PIECE_FIELDS)]; its gather is kept for window_batches.
        w = int(w)
        reads, gather = order.rank_window(w, dp_rank, dp_size)
        gathers[w] = gather
        for old in [k for k in gathers if k < w - 64]:
            gathers.pop(old, None)
        drop = (start - w * steps_per_window) * rank_batch if w == first_window else 0
        rows = []
        for d, shard, r, n in reads:
            begin, end = layouts[d].offsets([shard, shard], [r, r + n]).tolist()
            rows.append([shard_base[d] + shard, begin, n, end - begin, 0, w, steps_per_window, drop, 0])
        rows[-1][ENDS_WINDOW] = 1
        return np.array(rows, np.int64).reshape(-1, len(PIECE_FIELDS))

    def gather(e: np.ndarray, w: np.ndarray, batches: np.ndarray) -> np.ndarray:
        w = int(w)
        if w not in gathers:
            gathers[w] = order.rank_window(w, dp_rank, dp_size)[1]
        return gathers[w]

    @no_autograph
    def window_pieces(w):
        pieces = tf.numpy_function(plan_window, [w], tf.int64, stateful=True)
        return tf.data.Dataset.from_tensor_slices(tf.reshape(pieces, [-1, len(PIECE_FIELDS)]))

    pieces = tf.data.Dataset.range(first_window, last_window).flat_map(window_pieces)
    cache_source = types.SimpleNamespace(urls=all_urls)
    ds = window_pipeline(pieces, all_urls, cache_source, gather, spec, widths, tf_dtype, seq_len, rank_batch,
                         optional, r.num_parallel_reads, r.read_buffer_bytes, r.cache_dir, best_fit)
    if num_steps is not None:
        ds = ds.take(num_steps)
    ds = finish(ds, rank_batch, r.element_batch, r.keras, num_steps, r.sharded)
    log.info("tfdata: mixture %s (%d sources) rank %d/%d: %d x %d records per step, windows of %d steps, "
             "from step %d", mixture.description, len(sources), dp_rank, dp_size, dp_size, rank_batch,
             steps_per_window, start)
    return ds
