"""tf.data reader: `manifest.json` -> per-rank batches of one global order, seeded, resumable on any number of ranks.

Importable with only TensorFlow, NumPy and fsspec (no Apache Beam, no SentencePiece)::

    from pipeline.tfdata import make_dataset, dp_from_horovod

    dp_rank, dp_size = dp_from_horovod()            # or dp_from_smp() under SageMaker model parallel
    ds = make_dataset("s3://bucket/pile/train", global_batch_size=64, dp_rank=dp_rank, dp_size=dp_size,
                      seed=1234, start_step=global_step_from_checkpoint, num_epochs=None)
    for batch in ds:  # {"inputs", "labels": int32 [64 / dp_size, L], "loss_mask": float32 [.., L], ...}
        ...

The order (pipeline/reader/engine/plan.py) is a function of the manifest, the global batch size, the seed,
the epoch and the window size only: global batch k holds the same records whatever the number of
ranks, each rank receiving its contiguous slice of it (rank r: positions [r*B, (r+1)*B)). So a
run checkpointed at global step k on W ranks continues exactly on W' ranks (same global batch
size, `start_step=k`), and a rank reads only the records it uses, in runs of about
``window / dp_size`` records located by byte offset (every full record has the same size:
pipeline/format/layout.py).

The graph (pipeline/reader/graph.py), one pipeline over all epochs: the rank's plan (NumPy, once
per epoch) -> its pieces (a window's run of records within one shard), each read at its byte offset
-> one `parse_example` per piece -> a window's pieces joined, put in batch order and converted ->
one element per batch, a slice of the window. Python runs once per epoch and once per window, never
per record. The arguments are checked once (pipeline/reader/engine/request.py); a mixture's dataset is
pipeline/reader/mixture_dataset.py.

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

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np
import tensorflow as tf

from pipeline.format import records
from pipeline.format.mixture import is_mixture, load_mixture
from pipeline.reader.doc_dataset import store_dataset
from pipeline.reader.engine.plan import (
    DEFAULT_PARALLEL_READS,
    default_window,
    global_order,
    rank_plan,
    steps_for,
    window_gather,
)
from pipeline.reader.engine.request import (
    DEFAULT_READ_BUFFER_BYTES,
    ReadRequest,
    check_step_sizes,
    read_request,
    select_features,
)
from pipeline.reader.engine.store import is_store
from pipeline.reader.graph import PIECE_FIELDS, finish, no_autograph, parse_spec, window_pipeline
from pipeline.reader.mixture_dataset import mixture_dataset, mixture_state  # noqa: F401 (re-exported)
from pipeline.reader.shards import (
    DTYPES,
    check_checksums,
    check_sizes,
    load_source,
    locate_records,
)

log = logging.getLogger(__name__)


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
    seq_len: int | None = None,
    packing: str | None = None,
    pack_window: int | None = None,
    schedule=None,
) -> tf.data.Dataset:
    """Batches for one data-parallel rank (or one tf.distribute input pipeline), driven by `manifest.json`.

    Args:
        manifest: the pipeline's output directory or its manifest.json (local path or fsspec URL);
            or a mixture of outputs: a `mixture.json`, a `Mixture`, or a list of (name, output,
            weight) (pipeline/format/mixture.py, pipeline/reader/engine/mixture.py); or a document store
            (an output of `--output_format megatron`, on a filesystem path), packed when read.
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
            turn (pipeline/reader/engine/plan.py).
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
        num_steps: a mixture or a store: global steps to produce from the start step; None
            repeats forever. `num_epochs` must then be left at 1 or None (the epochs repeat).
        state: a mixture or a store: the dict `mixture_state(...)` / `store_state(...)` returned
            for the step to resume at (it replaces start_step); without it the order is walked
            from step 0 to `start_step` (a mixture's blend, a store's document lengths: seconds
            per million samples).
        seq_len: a store only: labels per sequence (the first segment's, with a schedule).
        packing: a store only: "concat" (default) or "best_fit" (pipeline/reader/engine/doc_stream.py).
        pack_window: a store only, best_fit: documents per packing window (default 1024).
        schedule: a store only: changes of seq_len and/or global batch size from a step on,
            ``[{"step": k, "seq_len": L, "global_batch_size": G}, ...]`` (pipeline/reader/engine/doc_plan.py).

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
    request = read_request(batch_size, global_batch_size, dp_rank, dp_size, input_context, seed=seed,
                           shuffle=shuffle, epoch=epoch, start_step=start_step, num_epochs=num_epochs,
                           shuffle_buffer=shuffle_buffer, num_parallel_reads=num_parallel_reads, verify=verify,
                           features=features, keras=keras, read_buffer_bytes=read_buffer_bytes,
                           cache_dir=cache_dir, num_steps=num_steps, state=state)
    store_options = {"seq_len": seq_len, "packing": packing, "pack_window": pack_window, "schedule": schedule}
    if is_mixture(manifest):
        if epoch or num_epochs not in (1, None):
            raise ValueError("a mixture has no epoch of its own (each source has its own): pass num_steps "
                             "and start_step (or state), not epoch or num_epochs")
        return mixture_dataset(load_mixture(manifest), request, **store_options)
    if is_store(manifest):
        if num_steps is not None and num_epochs not in (1, None):
            raise ValueError("num_steps with num_epochs: pass one of them (with num_steps the epochs repeat)")
        if num_steps is not None:
            request = dataclasses.replace(request, num_epochs=None)
        return store_dataset(manifest, request, **store_options)
    given = [k for k, v in store_options.items() if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: for document stores (--output_format megatron); a TFRecord output "
                         "is packed already")
    if num_steps is not None or state is not None:
        raise ValueError("num_steps and state are for mixtures; one output counts num_epochs and start_step")
    return _output_dataset(manifest, request)


def _output_dataset(manifest, request: ReadRequest) -> tf.data.Dataset:
    """make_dataset for one TFRecord output: its global order, epoch after epoch, through the shared graph."""
    r = request
    rank_batch, dp_rank, dp_size, seed, shuffle = r.rank_batch, r.dp_rank, r.dp_size, r.seed, r.shuffle
    epoch, start_step, num_epochs = r.epoch, r.start_step, r.num_epochs
    source = load_source(manifest)
    optional = select_features(r.features, source.optional, "the manifest")
    global_batch = rank_batch * dp_size
    check_step_sizes(source.manifest_file, global_batch, source.seq_len, r.shuffle_buffer)
    steps = steps_for(sum(source.counts), global_batch)
    if steps == 0:
        raise ValueError(
            f"{source.manifest_file}: {sum(source.counts)} records cannot fill one global batch of "
            f"{global_batch} ({dp_size} ranks x {rank_batch}); lower the batch size"
        )
    check_sizes(source)
    source = locate_records(source)
    if r.verify:
        check_checksums(source)

    first_epoch, first_step = epoch + start_step // steps, start_step % steps
    end_epoch = None if num_epochs is None else epoch + num_epochs
    token_bytes = 2 if source.token_dtype == "uint16" else 4
    window = r.shuffle_buffer or default_window(source.seq_len, token_bytes)
    tf_dtype = DTYPES[source.token_dtype]
    seq_len = source.seq_len
    best_fit = source.packing == records.BEST_FIT
    widths, spec = parse_spec(seq_len, optional, best_fit)
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

    @no_autograph
    def epoch_pieces(e):
        pieces = tf.numpy_function(plan_pieces, [e], tf.int64, stateful=False)
        return tf.data.Dataset.from_tensor_slices(tf.reshape(pieces, [-1, len(PIECE_FIELDS)]))

    # One pipeline over all epochs' pieces, so that each function below is instantiated once.
    last = tf.int64.max if end_epoch is None else max(end_epoch, first_epoch)
    pieces = tf.data.Dataset.range(first_epoch, last).flat_map(epoch_pieces)
    ds = window_pipeline(pieces, source.urls, source, gather, spec, widths, tf_dtype, seq_len, rank_batch, optional,
                         r.num_parallel_reads, r.read_buffer_bytes, r.cache_dir, best_fit)
    total = None
    if end_epoch is not None:
        total = max(0, (end_epoch - first_epoch) * steps - first_step) if end_epoch > first_epoch else 0
    ds = finish(ds, rank_batch, r.element_batch, r.keras, total, r.sharded)
    log.info(
        "tfdata: %s rank %d/%d: %d shards, %d steps/epoch of %d x %d records, from epoch %d step %d",
        source.manifest_file, dp_rank, dp_size, len(source.urls), steps, dp_size, rank_batch, first_epoch,
        first_step,
    )
    return ds


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
