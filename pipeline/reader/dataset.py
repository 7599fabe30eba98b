"""tf.data reader: `manifest.json` -> per-rank batches of one global order, seeded, resumable on any number of ranks.

Importable with only TensorFlow, NumPy and fsspec (no Apache Beam, no SentencePiece)::

    from pipeline.tfdata import make_dataset, dp_from_horovod

    dp_rank, dp_size = dp_from_horovod()            # or dp_from_smp() under SageMaker model parallel
    ds = make_dataset("s3://bucket/pile/train", global_batch_size=64, dp_rank=dp_rank, dp_size=dp_size,
                      seed=1234, start_step=global_step_from_checkpoint, num_epochs=None)
    for batch in ds:  # {"inputs", "labels": int32 [64 / dp_size, L], "loss_mask": float32 [.., L], ...}
        ...

The order (pipeline/reader/plan.py) is a function of the manifest, the global batch size, the seed,
the epoch and the window size only: global batch k holds the same records whatever the number of
ranks, each rank receiving its contiguous slice of it (rank r: positions [r*B, (r+1)*B)). So a
run checkpointed at global step k on W ranks continues exactly on W' ranks (same global batch
size, `start_step=k`), and a rank reads only the records it uses, in runs of about
``window / dp_size`` records located by byte offset (every full record has the same size:
pipeline/format/layout.py).

The graph, one pipeline over all epochs: the rank's plan (NumPy, once per epoch) -> its pieces
(a window's run of records within one shard), each read at its byte offset into one batch of
serialized records (`num_parallel_reads` pieces in flight, in order; the TFRecord reader checks
every record's CRC) -> one `parse_example` per piece -> the pieces of a window joined -> the whole
window put in batch order (one gather, a permutation computed once per window) and converted
(int32 `inputs`/`labels`, float `loss_mask`) -> one element per batch, a slice of the window.
Python runs once per epoch and once per window, never per record; no tf.data stage runs per
record except the read itself, and every function is instantiated once per iterator.

Layouts: a concat output pads only its one last record (`valid_labels`); a best_fit output
(manifest `packing.mode`) pads inside its records, segment id 0 marking padding, so its loss mask is
`segment_ids > 0` (the segment ids are parsed for it even when not returned).

Forms: a dict per batch (default); ``keras=True`` gives ``(x, y, sample_weight)`` for `model.fit`
(x = inputs, or a dict with segment_ids/positions when they are requested; sample_weight = the
loss mask). tf.distribute: pass ``input_context`` in `distribute_datasets_from_function` (each input
pipeline reads only its slice, elements are per-replica batches); a dataset built without ranks
(``dp_size=1``) can go to `experimental_distribute_dataset` (the strategy splits every global batch;
each worker then reads all of it). The auto-shard policy is set accordingly (OFF when the reader
already sharded, DATA otherwise), so the strategy never tries to shard by file.

Integrity: before step 0, on every rank, the manifest must add up and every listed shard must
exist with its byte size and have its last record where the size arithmetic puts it
(`ShardIntegrityError` / `ManifestError`, naming the file; ``verify=True`` also checks every
shard's sha256, which reads every shard). While reading, every piece is checked against the record
count the plan expects: a record that fails its CRC, a shard cut short or gone stops the rank at
that window with a `tf.errors.InvalidArgumentError` carrying ``ShardIntegrityError: <path>: ...``
(the TFRecord error itself is logged); `shard_errors()` turns it into `ShardIntegrityError`.
Nothing is skipped silently. Shards on a filesystem TensorFlow cannot open (``s3://`` without
tensorflow-io, ``memory://``) are read through fsspec by byte range into a local cache.
"""

# One module over 400 lines on purpose: `make_dataset` builds one tf.data graph, for one output or a
# mixture, whose stages close over the same plan and sizes (a split would pass a dozen values between
# modules; the mixture's order itself is pipeline/reader/mixture.py), and a third is docstrings.

from __future__ import annotations

import concurrent.futures
import logging
import os
import types

import numpy as np
import tensorflow as tf

from pipeline.format import records
from pipeline.format.mixture import Mixture, is_mixture, load_mixture
from pipeline.reader.integrity import short_read_message
from pipeline.reader.mixture import MixtureOrder, open_order
from pipeline.reader.plan import (
    DEFAULT_PARALLEL_READS,
    default_window,
    global_order,
    rank_plan,
    steps_for,
    window_gather,
)
from pipeline.reader.shards import (
    DTYPES,
    OPTIONAL_FEATURES,
    ShardCache,
    check_checksums,
    check_sizes,
    load_source,
    locate_records,
    tf_can_open,
    tf_path,
)

log = logging.getLogger(__name__)

DEFAULT_READ_BUFFER_BYTES = 8 << 20  # large sequential reads: few round trips on EFS / NFS
_no_autograph = tf.autograph.experimental.do_not_convert
# A row of the plan's pieces: a run of consecutive records of one shard (its bytes from byte_offset),
# and the window it belongs to (epoch, window index, batches, records the resume drops, whether the
# piece is the window's last).
PIECE_FIELDS = ("shard", "byte_offset", "records", "bytes", "epoch", "window", "batches", "drop", "ends_window")
_SHARD, _OFFSET, _RECORDS, _BYTES, _EPOCH, _WINDOW, _BATCHES, _DROP, _ENDS_WINDOW = range(len(PIECE_FIELDS))


def _ignore_errors(ds: tf.data.Dataset) -> tf.data.Dataset:
    # A read error ends this piece's records; the count check that follows turns the shortfall into
    # an error naming the file. The original error is logged.
    if hasattr(ds, "ignore_errors"):
        return ds.ignore_errors(log_warning=True)
    return ds.apply(tf.data.experimental.ignore_errors(log_warning=True))


def _rebatch(ds: tf.data.Dataset, batch_size: int) -> tf.data.Dataset:
    if hasattr(ds, "rebatch"):
        return ds.rebatch(batch_size, drop_remainder=True)
    return ds.unbatch().batch(batch_size, drop_remainder=True)


def _records_at(path, offset, count, buffer_size) -> tf.data.Dataset:
    """`count` serialized records of the TFRecord file(s) `path` (a vector: 0 or 1 file), from byte `offset`.

    `tf.data.TFRecordDataset` has no byte-offset argument; the public raw op behind it does, and
    `from_variant` wraps it. Build it only inside a dataset function (flat_map, interleave): TF
    cannot serialize the op's byte offsets, which an iterator over a top-level one needs (TF 2.15
    and 2.21). tests/test_tfdata.py reads at offsets and fails if any of this changes.
    """
    variant = tf.raw_ops.TFRecordDatasetV2(
        filenames=path, compression_type="", buffer_size=tf.cast(buffer_size, tf.int64),
        byte_offsets=tf.fill(tf.shape(path), tf.cast(offset, tf.int64)),
    )
    return tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string)).take(count)


def _batch_sizes(batch_size, global_batch_size, dp_rank, dp_size, input_context) -> tuple[int, int, int, int]:
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


def make_dataset(
    manifest: str | os.PathLike,
    batch_size: int | None = None,
    *,
    global_batch_size: int | None = None,
    dp_rank: int = 0,
    dp_size: int = 1,
    input_context: tf.distribute.InputContext | None = None,
    seed: int | None = None,
    shuffle: bool = True,
    epoch: int = 0,
    start_step: int = 0,
    num_epochs: int | None = 1,
    shuffle_buffer: int | None = None,
    verify: bool = False,
    features: tuple[str, ...] | list[str] | None = None,
    keras: bool = False,
    num_parallel_reads: int = DEFAULT_PARALLEL_READS,
    read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES,
    cache_dir: str | None = None,
    num_steps: int | None = None,
    state: dict | None = None,
) -> tf.data.Dataset:
    """Batches for one data-parallel rank (or one tf.distribute input pipeline), driven by `manifest.json`.

    Args:
        manifest: the pipeline's output directory or its manifest.json (local path or fsspec URL);
            or a mixture of outputs: a `mixture.json`, a `Mixture`, or a list of (name, output,
            weight) (pipeline/format/mixture.py, pipeline/reader/mixture.py).
        batch_size: per-rank batch size B (per replica with `input_context`); or give
            `global_batch_size` instead. The global batch B * dp_size fixes the order.
        global_batch_size: records per global step, over all ranks; each rank gets its slice.
        dp_rank: this rank's data-parallel index (`hvd.rank()`, or `smp.dp_rank()` under SMP:
            model-parallel peers of one data-parallel group must pass the same value).
        dp_size: number of data-parallel ranks.
        input_context: a `tf.distribute.InputContext` (from `distribute_datasets_from_function`):
            sets the rank and size from the input pipeline; elements are per-replica batches.
        seed: base seed for the order; required when shuffling.
        shuffle: False reads the manifest's order, each window's records dealt to its batches in
            turn (pipeline/reader/plan.py).
        epoch: first epoch to produce (changes the order when shuffling).
        start_step: global batches of `epoch` already consumed (may exceed one epoch).
        num_epochs: epochs to produce, counted from `epoch` (the first starting at `start_step`);
            None repeats forever.
        shuffle_buffer: records per window of the global order (the shuffle unit, rounded to
            whole global batches); each rank holds about shuffle_buffer / dp_size of them. None:
            `default_window(seq_len, token bytes)`, about 8 MiB of token ids.
        verify: also check every shard's sha256 before starting (reads every shard).
        features: optional features to return besides inputs/labels/loss_mask: a subset of
            ("segment_ids", "positions"); None returns those the manifest declares.
        keras: yield `(x, y, sample_weight)` tuples for `model.fit` instead of dicts.
        num_parallel_reads: pieces (a window's records in one shard) each rank reads
            concurrently (does not change the order).
        read_buffer_bytes: largest read per request.
        cache_dir: where byte ranges of shards on filesystems TensorFlow cannot open are copied
            (default: the system temporary directory).
        num_steps: a mixture only (it has no epoch of its own): global steps to produce from the
            start step; None repeats forever. `num_epochs` must then be left at 1 or None.
        state: a mixture only: the dict `mixture_state(...)` returned for the step to resume at
            (it replaces start_step); without it a mixture starts at `start_step`, its blend
            recomputed from step 0 (a few seconds per million samples).

    Returns:
        A `tf.data.Dataset` of dicts: "inputs", "labels" int32 [B, L]; "loss_mask" float32 [B, L]
        (0 on padding: label positions >= the record's valid_labels, or with segment id 0 in a
        best_fit output); "segment_ids", "positions" int32
        [B, L] when requested. Every rank yields `steps_per_epoch(...)` batches per epoch.

    Raises:
        ValueError: on invalid arguments, including `shuffle=True` without a seed.
        ManifestError: no usable manifest, or one whose numbers do not add up.
        ShardIntegrityError: a listed shard is missing, has another size or record layout or
            (with `verify`) another checksum. While iterating, a shard that reads short or fails its
            CRC raises a `tf.errors.InvalidArgumentError` carrying "ShardIntegrityError: <path>";
            `shard_errors()` turns it into ShardIntegrityError.
    """
    if shuffle and seed is None:
        raise ValueError(
            "shuffle=True needs a seed (the order must be the same on every rank and on resumption); "
            "pass seed=<int>, or shuffle=False to read in manifest order."
        )
    if seed is not None and not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed {seed} must be an integer in [0, 2**64)")
    rank_batch, element_batch, dp_rank, dp_size = _batch_sizes(
        batch_size, global_batch_size, dp_rank, dp_size, input_context)
    if epoch < 0 or start_step < 0:
        raise ValueError(f"epoch ({epoch}) and start_step ({start_step}) must be >= 0")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs {num_epochs} must be >= 1, or None to repeat forever")
    if (shuffle_buffer is not None and shuffle_buffer < 1) or num_parallel_reads < 1:
        raise ValueError("shuffle_buffer and num_parallel_reads must be >= 1")

    if is_mixture(manifest):
        if epoch or num_epochs not in (1, None):
            raise ValueError("a mixture has no epoch of its own (each source has its own): pass num_steps "
                             "and start_step (or state), not epoch or num_epochs")
        return _mixture_dataset(
            load_mixture(manifest), rank_batch, element_batch, dp_rank, dp_size, input_context is not None,
            seed=seed, shuffle=shuffle, start_step=start_step, num_steps=num_steps, state=state,
            shuffle_buffer=shuffle_buffer, verify=verify, features=features, keras=keras,
            num_parallel_reads=num_parallel_reads, read_buffer_bytes=read_buffer_bytes, cache_dir=cache_dir)
    if num_steps is not None or state is not None:
        raise ValueError("num_steps and state are for mixtures; one output counts num_epochs and start_step")
    source = load_source(manifest)
    optional = _select_features(features, source.optional, "the manifest")
    global_batch = rank_batch * dp_size
    steps = steps_for(sum(source.counts), global_batch)
    if steps == 0:
        raise ValueError(
            f"{source.manifest_file}: {sum(source.counts)} records cannot fill one global batch of "
            f"{global_batch} ({dp_size} ranks x {rank_batch}); lower the batch size"
        )
    check_sizes(source)
    source = locate_records(source)
    if verify:
        check_checksums(source)

    first_epoch, first_step = epoch + start_step // steps, start_step % steps
    end_epoch = None if num_epochs is None else epoch + num_epochs
    token_bytes = 2 if source.token_dtype == "uint16" else 4
    window = shuffle_buffer or default_window(source.seq_len, token_bytes)
    tf_dtype = DTYPES[source.token_dtype]
    seq_len = source.seq_len
    best_fit = source.packing == records.BEST_FIT
    widths, spec = _parse_spec(seq_len, optional, best_fit)
    counts = np.array(source.counts, dtype=np.int64)
    layout = source.layout
    first_column = dp_rank * rank_batch

    def plan_pieces(e: np.ndarray) -> np.ndarray:
        # The epoch's pieces, window after window: int64 [k, len(PIECE_FIELDS)].
        e = int(e)
        order = global_order(counts, global_batch, seed=seed, epoch=e, shuffle=shuffle, window=window)
        plan = rank_plan(order, dp_rank, dp_size, first_step if e == first_epoch else 0)
        shard, first, n = plan.reads[:, 0], plan.reads[:, 1], plan.reads[:, 2]
        begin = layout.offsets(shard, first)
        owner = np.repeat(np.arange(len(plan.windows)), plan.windows[:, 5])
        last = np.zeros(len(owner), np.int64)
        last[np.cumsum(plan.windows[:, 5]) - 1] = 1
        w = plan.windows[owner]
        return np.stack([shard, begin, n, layout.offsets(shard, first + n) - begin, np.full(len(owner), e),
                         w[:, 0], w[:, 1], w[:, 3], last], axis=1).reshape(-1, len(PIECE_FIELDS)).astype(np.int64)

    def gather(e: np.ndarray, w: np.ndarray, batches: np.ndarray) -> np.ndarray:
        return window_gather(seed, int(e), shuffle, int(w), int(batches), first_column, rank_batch)

    @_no_autograph
    def epoch_pieces(e):
        pieces = tf.numpy_function(plan_pieces, [e], tf.int64, stateful=False)
        return tf.data.Dataset.from_tensor_slices(tf.reshape(pieces, [-1, len(PIECE_FIELDS)]))

    # One pipeline over all epochs' pieces, so that each function below is instantiated once.
    last = tf.int64.max if end_epoch is None else max(end_epoch, first_epoch)
    pieces = tf.data.Dataset.range(first_epoch, last).flat_map(epoch_pieces)
    ds = _window_pipeline(pieces, source.urls, source, gather, spec, widths, tf_dtype, seq_len, rank_batch, optional,
                          num_parallel_reads, read_buffer_bytes, cache_dir, best_fit)
    total = None
    if end_epoch is not None:
        total = max(0, (end_epoch - first_epoch) * steps - first_step) if end_epoch > first_epoch else 0
    ds = _finish(ds, rank_batch, element_batch, keras, total, dp_size > 1 or input_context is not None)
    log.info(
        "tfdata: %s rank %d/%d: %d shards, %d steps/epoch of %d x %d records, from epoch %d step %d",
        source.manifest_file, dp_rank, dp_size, len(source.urls), steps, dp_size, rank_batch, first_epoch,
        first_step,
    )
    return ds


def _parse_spec(seq_len: int, optional: tuple[str, ...], best_fit: bool) -> tuple[tuple, dict]:
    """(each parsed array's (name, width), the records' parse spec) for the features a reader returns.

    A best_fit output marks padding by segment id 0, so its loss mask needs the segment ids parsed.
    """
    parsed = tuple(dict.fromkeys((*optional, *((records.SEGMENT_IDS,) if best_fit else ()))))
    widths = ((records.TOKENS, seq_len + 1), *((name, seq_len) for name in parsed))
    spec = {
        records.TOKENS: tf.io.FixedLenFeature([], tf.string),
        records.VALID_LABELS: tf.io.FixedLenFeature([], tf.int64, default_value=seq_len),
        **{name: tf.io.FixedLenFeature([], tf.string) for name in parsed},
    }
    return widths, spec


def _select_features(features, declared: tuple[str, ...], where: str) -> tuple[str, ...]:
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


def _mixture_dataset(mixture: Mixture, rank_batch, element_batch, dp_rank, dp_size, from_context, *, seed, shuffle,
                     start_step, num_steps, state, shuffle_buffer, verify, features, keras, num_parallel_reads,
                     read_buffer_bytes, cache_dir) -> tf.data.Dataset:
    """make_dataset for a mixture: the same graph, fed window by window from the mixture's order."""
    if num_steps is not None and num_steps < 1:
        raise ValueError(f"num_steps {num_steps} must be >= 1, or None to repeat forever")
    if state is not None and start_step:
        raise ValueError("pass state (it holds the step) or start_step, not both")
    sources = _mixture_sources(mixture, verify)
    declared = tuple(f for f in OPTIONAL_FEATURES if all(f in s.optional for s in sources))
    optional = _select_features(features, declared, "every source of the mixture")
    first = sources[0]
    global_batch = rank_batch * dp_size
    window = shuffle_buffer or default_window(first.seq_len, 2 if first.token_dtype == "uint16" else 4)
    order = MixtureOrder(mixture.names, [s.counts for s in sources], mixture.schedule, global_batch, seed=seed,
                         shuffle=shuffle, window_steps=max(1, window // global_batch), state=state)
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
    widths, spec = _parse_spec(seq_len, optional, best_fit)
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
        rows[-1][_ENDS_WINDOW] = 1
        return np.array(rows, np.int64).reshape(-1, len(PIECE_FIELDS))

    def gather(e: np.ndarray, w: np.ndarray, batches: np.ndarray) -> np.ndarray:
        w = int(w)
        if w not in gathers:
            gathers[w] = order.rank_window(w, dp_rank, dp_size)[1]
        return gathers[w]

    @_no_autograph
    def window_pieces(w):
        pieces = tf.numpy_function(plan_window, [w], tf.int64, stateful=True)
        return tf.data.Dataset.from_tensor_slices(tf.reshape(pieces, [-1, len(PIECE_FIELDS)]))

    pieces = tf.data.Dataset.range(first_window, last_window).flat_map(window_pieces)
    cache_source = types.SimpleNamespace(urls=all_urls)
    ds = _window_pipeline(pieces, all_urls, cache_source, gather, spec, widths, tf_dtype, seq_len, rank_batch,
                          optional, num_parallel_reads, read_buffer_bytes, cache_dir, best_fit)
    if num_steps is not None:
        ds = ds.take(num_steps)
    ds = _finish(ds, rank_batch, element_batch, keras, num_steps, dp_size > 1 or from_context)
    log.info("tfdata: mixture %s (%d sources) rank %d/%d: %d x %d records per step, windows of %d steps, "
             "from step %d", mixture.description, len(sources), dp_rank, dp_size, dp_size, rank_batch,
             steps_per_window, start)
    return ds


def _window_pipeline(pieces, urls_list, cache_source, gather, spec, widths, tf_dtype, seq_len, rank_batch,
                     optional, num_parallel_reads, read_buffer_bytes, cache_dir, best_fit) -> tf.data.Dataset:
    """Pieces (rows of PIECE_FIELDS, window after window) -> one element per batch of the rank.

    `urls_list`: the location of every shard a piece names; `gather(epoch, window, batches)`: the
    window's records (its pieces' records, concatenated) in the order of its batches; `best_fit`:
    padding is marked by segment id 0 (which `widths` then parses) rather than by valid_labels.
    """
    urls = tf.constant(list(urls_list))  # for error messages
    cache = None
    if tf_can_open(urls_list[0]):
        local_paths = [tf_path(u) for u in urls_list]
        literal = not any(c in p for p in local_paths for c in "*?[]{}\\")
        paths = tf.constant(local_paths)

        def locate(piece):
            # a piece -> (file [1], byte offset in it)
            return tf.reshape(paths[piece[_SHARD]], [1]), piece[_OFFSET]

    else:
        cache = ShardCache(cache_source, cache_dir)
        literal = True

        def locate(piece):
            files = tf.numpy_function(cache.fetch_all, [piece[None, : _BYTES + 1]], tf.string, stateful=True)
            return tf.reshape(files, [1]), tf.zeros([], tf.int64)

    def read_piece(piece):
        # A piece -> exactly one element: (its serialized records [k], the file read [1], the piece);
        # k = the piece's records, or the records read before a read error. A file that vanished
        # since the start checks reads as no file (ignore_errors would retry opening it forever):
        # `matching_files` of the literal path, which has no glob characters. No transformation
        # taking a function (map, filter, ...) in here: this dataset is built once per piece, and
        # such a function would be instantiated (graph optimization passes included) every time.
        path, offset = locate(piece)
        files = tf.io.matching_files(path[0]) if literal else path
        reads = (piece[_BYTES] + read_buffer_bytes - 1) // read_buffer_bytes
        buffer = (piece[_BYTES] + reads - 1) // reads  # equal reads that end where the piece ends
        recs = _ignore_errors(_records_at(files, offset, piece[_RECORDS], buffer)).batch(piece[_RECORDS])
        recs = recs.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))).take(1)
        return tf.data.Dataset.zip((recs, tf.data.Dataset.from_tensors(path), tf.data.Dataset.from_tensors(piece)))

    @_no_autograph
    def parse_piece(recs, path, piece):
        # The piece must have given exactly its records; then one parse, token arrays kept in the
        # shard's dtype: {name: [k, width]}, valid_labels [k].
        got = tf.size(recs, tf.int64)
        message = short_read_message(urls[piece[_SHARD]], got, piece[_RECORDS])
        checks = [tf.debugging.Assert(tf.equal(got, piece[_RECORDS]), [message])]
        if cache is not None:  # the piece is read: its cached copy can go
            with tf.control_dependencies(checks):
                checks.append(tf.numpy_function(cache.release, [path], tf.int64, stateful=True))
        with tf.control_dependencies(checks):
            parsed = tf.io.parse_example(recs, spec)
        out = {name: tf.reshape(tf.io.decode_raw(parsed[name], tf_dtype, little_endian=True), [-1, width])
               for name, width in widths}
        out[records.VALID_LABELS] = parsed[records.VALID_LABELS]
        return out, piece

    # A window's pieces are collected in TensorLists (one per array) and concatenated once, when the
    # window is complete: joining them one by one would copy the window ~pieces/2 times over (a
    # window of a 22-source mixture is ~25 pieces).
    shapes = {name: [-1, width] for name, width in widths}
    shapes[records.VALID_LABELS] = [-1]
    dtypes = {name: tf_dtype for name, _ in widths}
    dtypes[records.VALID_LABELS] = tf.int64

    def empty_lists():
        return {name: tf.raw_ops.EmptyTensorList(element_shape=tf.constant(shape, tf.int32), max_num_elements=-1,
                                                 element_dtype=dtypes[name]) for name, shape in shapes.items()}

    @_no_autograph
    def join(acc, parsed_piece):
        # Emits (window complete?, its pieces' arrays so far, piece). A window's first piece starts
        # from emptied lists (resized to 0 after the previous window's last piece): no tf.cond.
        part, piece = parsed_piece
        joined = {}
        for name, handle in acc[1].items():
            keep = tf.cast(1 - acc[0], tf.int32) * tf.raw_ops.TensorListLength(input_handle=handle)
            handle = tf.raw_ops.TensorListResize(input_handle=handle, size=keep)
            joined[name] = tf.raw_ops.TensorListPushBack(input_handle=handle, tensor=part[name])
        return (piece[_ENDS_WINDOW], joined), (piece[_ENDS_WINDOW], joined, piece)

    def concat(lists):
        return {name: tf.raw_ops.TensorListConcatV2(
            input_handle=handle, element_shape=tf.constant(shapes[name], tf.int32),
            leading_dims=tf.zeros([0], tf.int64), element_dtype=dtypes[name])[0] for name, handle in lists.items()}

    @_no_autograph
    def window_batches(lists, piece):
        # A whole window (its last piece's row) -> its batches, in order from the resume point,
        # converted once for the window: {name: [batches, rank_batch, seq_len]}. Its batches are
        # slices of these arrays, which live until the window's last batch is consumed.
        order = tf.numpy_function(gather, [piece[_EPOCH], piece[_WINDOW], piece[_BATCHES]], tf.int64, stateful=False)
        arrays = concat(lists)
        order = tf.reshape(order, [-1])[piece[_DROP] :]
        shape = [-1, rank_batch, seq_len]
        tokens = tf.cast(tf.gather(arrays[records.TOKENS], order), tf.int32)
        valid = tf.gather(arrays[records.VALID_LABELS], order)
        real = tf.range(seq_len, dtype=tf.int64)[None, :] < valid[:, None]
        if best_fit:
            real = tf.gather(arrays[records.SEGMENT_IDS], order) > 0
        out = {
            "inputs": tf.reshape(tokens[:, :-1], shape),
            "labels": tf.reshape(tokens[:, 1:], shape),
            "loss_mask": tf.reshape(tf.cast(real, tf.float32), shape),
        }
        for name in optional:
            out[name] = tf.reshape(tf.cast(tf.gather(arrays[name], order), tf.int32), shape)
        return out

    read = pieces.interleave(read_piece, cycle_length=num_parallel_reads, block_length=1,
                             num_parallel_calls=num_parallel_reads, deterministic=True)
    parsed = read.map(parse_piece, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    windows = parsed.scan((tf.constant(1, tf.int64), empty_lists()), join).filter(lambda done, lists, piece: done > 0)
    ds = windows.map(lambda done, lists, piece: window_batches(lists, piece),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # One element per batch: a slice of its window's arrays (no copy when the slice is aligned).
    ds = ds.flat_map(tf.data.Dataset.from_tensor_slices)
    return ds


def _finish(ds, rank_batch, element_batch, keras, total, sharded) -> tf.data.Dataset:
    """Replica batches, the Keras form, the cardinality (`total` steps, None: infinite), options."""
    per_step = rank_batch // element_batch
    if per_step > 1:  # tf.distribute: the pipeline's slice, cut into its replicas' batches
        ds = _rebatch(ds, element_batch)
    if keras:
        ds = ds.map(_keras_form, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if total is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(total * per_step))
    else:
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    # The reader shards by itself: a strategy must not shard by file (there is no file list to
    # shard). Already sharded: OFF; one dataset for all workers: DATA (each takes its part).
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF if sharded else tf.data.experimental.AutoShardPolicy.DATA)
    ds = ds.with_options(options)
    return ds


def _keras_form(batch: dict) -> tuple:
    """(x, y, sample_weight): x = inputs (with segment_ids/positions, a dict), y = labels."""
    extra = {name: batch[name] for name in OPTIONAL_FEATURES if name in batch}
    x = {"inputs": batch["inputs"], **extra} if extra else batch["inputs"]
    return x, batch["labels"], batch["loss_mask"]


def steps_per_epoch(manifest, batch_size: int, dp_size: int = 1) -> int:
    """Global batches per epoch (the same on every rank): total records // (batch_size * dp_size).

    Args:
        manifest: output directory, manifest.json path, or an already loaded manifest dict.
        batch_size: per-rank batch size (or the global batch size with dp_size=1).
        dp_size: number of data-parallel ranks.

    Returns:
        The number of steps (0 when the data cannot fill one global batch).
    """
    if isinstance(manifest, dict):
        total = sum(int(s["records"]) for s in manifest["shards"])
    else:
        total = sum(load_source(manifest).counts)
    return steps_for(total, batch_size, dp_size)


def dp_from_horovod() -> tuple[int, int]:
    """(hvd.rank(), hvd.size()) from horovod.tensorflow; call after `hvd.init()`."""
    try:
        import horovod.tensorflow as hvd
    except ImportError as e:
        raise RuntimeError(
            "dp_from_horovod: horovod.tensorflow is not importable; install Horovod with TensorFlow "
            "support (HOROVOD_WITH_TENSORFLOW=1 pip install horovod) or pass dp_rank/dp_size"
        ) from e
    return int(hvd.rank()), int(hvd.size())


def dp_from_smp() -> tuple[int, int]:
    """(smp.dp_rank(), smp.dp_size()) from SageMaker model parallel; call after `smp.init()`.

    Model-parallel peers share a data-parallel rank, so they get identical batches.
    """
    try:
        import smdistributed.modelparallel.tensorflow as smp
    except ImportError as e:
        raise RuntimeError(
            "dp_from_smp: smdistributed.modelparallel.tensorflow is not importable; it ships in "
            "SageMaker's TensorFlow training containers with model parallelism enabled. Outside "
            "SageMaker use dp_from_horovod() or pass dp_rank/dp_size"
        ) from e
    return int(smp.dp_rank()), int(smp.dp_size())
