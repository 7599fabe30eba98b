"""tf.data reader: `manifest.json` -> per-data-parallel-rank, seeded, exactly resumable batches.

Importable with only TensorFlow, NumPy and fsspec (no Apache Beam, no SentencePiece)::

    from pipeline.tfdata import make_dataset, steps_per_epoch, dp_from_horovod

    dp_rank, dp_size = dp_from_horovod()            # or dp_from_smp() under SageMaker model parallel
    ds = make_dataset("s3://bucket/pile/train", batch_size=8, dp_rank=dp_rank, dp_size=dp_size,
                      seed=1234, epoch=0, start_step=step_from_checkpoint, num_epochs=None)
    for batch in ds:  # {"inputs", "labels": int32 [8, L], "loss_mask": float32 [8, L], ...}
        ...

How one epoch is laid out (everything below is a pure function of the manifest and the arguments,
computed identically on every rank; nothing depends on timing, the clock or the number of threads):

1. **Shard order.** With ``shuffle=True`` the shards are permuted by a hash of (seed, epoch); without
   shuffling they keep the manifest's order. Concatenated in that order they form the epoch's
   *stream* of N records (N = the sum of the manifest's record counts).
2. **Equal slices.** ``steps = N // (dp_size * batch_size)`` and every rank gets ``P = steps *
   batch_size`` records: rank r takes stream positions ``[r*P, (r+1)*P)``. The last
   ``N - dp_size*P`` records of the stream (fewer than ``dp_size * batch_size``: the tail of the
   epoch's last shard(s) in shard order, so a different tail each epoch when shuffling) are dropped
   for that epoch. With at least as many shards as ranks this is file-level sharding: a rank reads
   whole shards, and only the (at most two) shards on its slice's edges are split by record between
   two ranks. With fewer shards than ranks it degrades to a record-level split: each rank reads a
   record range inside one or two shards, never the whole dataset. Worked example, shards of
   ``[5, 3, 4]`` records, shard order ``[2, 0, 1]``, ``dp_size=2``, ``batch_size=2``: N = 12, steps =
   3, P = 6; rank 0 reads shard 2 records 0-3 and shard 0 records 0-1; rank 1 reads shard 0 records
   2-4 and shard 1 records 0-2; nothing is dropped.
3. **Windows and lanes.** A rank's slice is a list of *segments* (shard, first record, end record).
   Each segment is cut into *windows* of ``shuffle_buffer`` consecutive records (by default about
   8 MiB of token ids: 2048 records at seq_len 2048; the last window may be shorter), followed by
   an empty end-of-segment marker. Segment k is read by lane
   ``k % num_parallel_reads``; the lanes read their shards concurrently (a parallel interleave, one
   TFRecordDataset and one thread per lane), and the rank's order is round-robin over the lanes,
   one window (or marker) at a time: lane 0's first window, lane 1's first window, ..., lane 0's
   second window, ... (a lane that has run out is passed over). Every window is checked against the
   record count the plan expects, the marker included: a shard that reads short is named at once.
4. **Record shuffle.** Each window's records are permuted by a hash of (seed, epoch, dp_rank,
   window number). This replaces a tf.data shuffle buffer, whose order depends on everything that
   went in before it: here every window's content and permutation follow from the plan alone,
   which is what makes resumption exact and cheap. The shards themselves were already shuffled
   globally by the pipeline (records assigned to shards by a hashed key), so windows mix records
   from all over the corpus; the window shuffle changes their order every epoch.
5. **Batches.** Each window is parsed in one ``parse_example`` call (token ids stay in the shard's
   dtype until the end), permuted, and the windows are re-cut into batches of ``batch_size``
   (``drop_remainder=True``; P is a multiple of the batch size, so nothing is lost here), which
   become int32 ``inputs``/``labels`` and a float ``loss_mask``. Every rank yields exactly ``steps``
   batches per epoch: no Horovod deadlock from uneven ranks. Epochs follow one another
   (``num_epochs``, or forever with ``None``); each epoch's plan is computed when the epoch starts.

Resumption at ``(epoch, start_step)``: the plan gives the window holding record ``start_step *
batch_size`` and, for every lane, the window it reads next; each lane opens its current shard and
skips to that window's first record (TFRecord skipping reads but does not parse; at most one partial
shard per lane, the lanes skipping concurrently), the first window is permuted as in the
uninterrupted run and its leading records dropped (at most one window re-read). The epoch is never
replayed. ``start_step`` may exceed an epoch (pass the global step with ``epoch=0``); it carries
into later epochs. Resuming exactly requires the same manifest, ``batch_size``, ``dp_size``,
``seed``, ``shuffle``, ``shuffle_buffer`` and ``num_parallel_reads``; a different number of ranks is
exact at an epoch boundary (``epoch=e+1, start_step=0``), not inside one. The iterator can also be
saved with ``tf.train.Checkpoint(iterator=it)`` (its buffered windows then go into the checkpoint);
storing the step and passing ``start_step`` is cheaper.

Integrity: ``make_dataset`` checks, on every rank and before step 0, that every shard the manifest
lists exists with its byte size (a file cut at a record boundary reads as clean TFRecord, so only
this check catches it); ``verify=True`` also checks every shard's sha256 (every rank then reads
every shard once: costly on large outputs). While reading, a record that fails its CRC or a shard
that reads short or has vanished stops the rank at that window with an error naming the file
(``ShardIntegrityError: <path>`` inside a ``tf.errors.OpError``; the TFRecord error itself is
logged); nothing is skipped silently. Other ranks then wait in their next collective until the
launcher (mpirun, horovodrun, SageMaker) ends the job on the failed rank's exit; pass
``verify=True`` to catch corruption on every rank before step 0 instead. Shards on a filesystem
TensorFlow cannot open (``s3://`` without tensorflow-io, ``memory://``) are copied through fsspec
into a local cache, checked against the manifest's size and sha256 on the way (so corruption is
caught before any of the shard's records is used), and read from there; at most ``2 *
num_parallel_reads + 2`` copies exist at a time.

Speed: lanes read concurrently with 8 MiB reads (few round trips on EFS / NFS), windows are parsed
in parallel (one call per window), batches are finished in parallel and prefetched (AUTOTUNE); see
BENCHMARKS.md (reader section) for rates against raw TFRecordDataset. Memory is bounded by a few
windows per lane plus the prefetched batches. Python (``tf.numpy_function``) runs once per epoch
(the plan) and once per window (its permutation), never per record.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import tensorflow as tf

from pipeline.core.hashing import keyed_permutation
from pipeline.format import records
from pipeline.reader.plan import (
    DEFAULT_PARALLEL_READS,
    default_window,
    plan_epoch,
    steps_for,
)
from pipeline.reader.shards import (
    DTYPES,
    OPTIONAL_FEATURES,
    ShardCache,
    ShardSource,
    check_checksums,
    check_sizes,
    load_source,
    tf_can_open,
    tf_path,
)

log = logging.getLogger(__name__)

DEFAULT_READ_BUFFER_BYTES = 8 << 20  # large sequential reads: few round trips on EFS / NFS


def _ignore_errors(ds: tf.data.Dataset) -> tf.data.Dataset:
    # A read error ends this shard's records (TFRecordDataset moves past the file); the count check
    # that follows turns the shortfall into an error naming the file. The original error is logged.
    if hasattr(ds, "ignore_errors"):
        return ds.ignore_errors(log_warning=True)
    return ds.apply(tf.data.experimental.ignore_errors(log_warning=True))


def _rebatch(ds: tf.data.Dataset, batch_size: int) -> tf.data.Dataset:
    if hasattr(ds, "rebatch"):
        return ds.rebatch(batch_size, drop_remainder=True)
    return ds.unbatch().batch(batch_size, drop_remainder=True)  # TF < 2.12


_no_autograph = tf.autograph.experimental.do_not_convert


@_no_autograph
def _read_windows(path, first, count, *, window: int, read_buffer: int, literal: bool) -> tf.data.Dataset:
    """Records [first, first + count) of one shard in windows of `window`, then an empty marker.

    A read error ends the shard's records early (`_ignore_errors` logs it); the marker then arrives
    where the plan expects a full window (or a window arrives short), and the window check in
    `make_dataset` raises an error naming the file. `ignore_errors` would retry a file that cannot
    be opened forever, so a file that has vanished since the start check is looked up first
    (`matching_files` of the literal path: no glob characters) and read as an empty list instead.
    """
    files = tf.io.matching_files(path) if literal else path
    recs = tf.data.TFRecordDataset(files, buffer_size=read_buffer).skip(first).take(count)
    marker = tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))
    return _ignore_errors(recs).batch(window).concatenate(marker)


def _parse_spec(source: ShardSource, optional: tuple[str, ...]) -> dict:
    spec = {
        records.TOKENS: tf.io.FixedLenFeature([], tf.string),
        records.VALID_LABELS: tf.io.FixedLenFeature([], tf.int64, default_value=source.seq_len),
    }
    for name in optional:
        spec[name] = tf.io.FixedLenFeature([], tf.string)
    return spec


def make_dataset(
    manifest: str | os.PathLike,
    batch_size: int,
    *,
    dp_rank: int = 0,
    dp_size: int = 1,
    seed: int | None = None,
    shuffle: bool = True,
    epoch: int = 0,
    start_step: int = 0,
    num_epochs: int | None = 1,
    shuffle_buffer: int | None = None,
    verify: bool = False,
    features: tuple[str, ...] | list[str] | None = None,
    num_parallel_reads: int = DEFAULT_PARALLEL_READS,
    read_buffer_bytes: int = DEFAULT_READ_BUFFER_BYTES,
    cache_dir: str | None = None,
) -> tf.data.Dataset:
    """Batches for one data-parallel rank, driven by the output's `manifest.json`.

    Args:
        manifest: the pipeline's output directory or its manifest.json (local path or fsspec URL).
        batch_size: per-rank batch size B.
        dp_rank: this rank's data-parallel index (`hvd.rank()`, or `smp.dp_rank()` under SMP:
            model-parallel peers of one data-parallel group must pass the same value).
        dp_size: number of data-parallel ranks.
        seed: base seed for the shard order and record permutations; required when shuffling.
        shuffle: False reads shards in manifest order and windows unpermuted (still sharded).
        epoch: first epoch to produce (changes the order when shuffling).
        start_step: batches of `epoch` already consumed (may exceed one epoch).
        num_epochs: epochs to produce, counted from `epoch` (the first starting at `start_step`);
            None repeats forever.
        shuffle_buffer: records per shuffle window (the unit of reading, parsing and shuffling);
            None: `default_window(seq_len, token bytes)`, about 8 MiB of token ids per window.
        verify: also check every shard's sha256 before starting (reads every shard).
        features: optional features to return besides inputs/labels/loss_mask: a subset of
            ("segment_ids", "positions"); None returns those the manifest declares.
        num_parallel_reads: shards each rank reads concurrently.
        read_buffer_bytes: read size per shard reader.
        cache_dir: where shards on filesystems TensorFlow cannot open are copied (default: the
            system temporary directory).

    Returns:
        A `tf.data.Dataset` of dicts: "inputs", "labels" int32 [B, L]; "loss_mask" float32 [B, L]
        (0 at label positions >= the record's valid_labels); "segment_ids", "positions" int32
        [B, L] when requested. Every rank yields `steps_per_epoch(...)` batches per epoch.

    Raises:
        ValueError: on invalid arguments, including `shuffle=True` without a seed.
        pipeline.manifest.ManifestError: no usable manifest.
        ShardIntegrityError: a listed shard is missing, has another size or (with `verify`) another
            checksum. While iterating, a shard that reads short or fails its CRC raises a
            `tf.errors.OpError` whose message starts with "ShardIntegrityError:" and the shard's path.
    """
    if shuffle and seed is None:
        raise ValueError(
            "shuffle=True needs a seed (the order must be the same on every rank and on resumption); "
            "pass seed=<int>, or shuffle=False to read in manifest order."
        )
    if seed is not None and not 0 <= int(seed) < 2**64:
        raise ValueError(f"seed {seed} must be an integer in [0, 2**64)")
    if not 0 <= dp_rank < dp_size:
        raise ValueError(f"dp_rank {dp_rank} must be in [0, dp_size={dp_size})")
    if epoch < 0 or start_step < 0:
        raise ValueError(f"epoch ({epoch}) and start_step ({start_step}) must be >= 0")
    if num_epochs is not None and num_epochs < 1:
        raise ValueError(f"num_epochs {num_epochs} must be >= 1, or None to repeat forever")
    if (shuffle_buffer is not None and shuffle_buffer < 1) or num_parallel_reads < 1:
        raise ValueError("shuffle_buffer and num_parallel_reads must be >= 1")

    source = load_source(manifest)
    if features is None:
        optional = source.optional
    else:
        optional = tuple(features)
        unknown = [f for f in optional if f not in OPTIONAL_FEATURES]
        absent = [f for f in optional if f not in source.optional]
        if unknown or absent:
            raise ValueError(
                f"features {optional!r}: choose from {OPTIONAL_FEATURES} among those the manifest "
                f"declares ({source.optional}); write them with document boundaries enabled"
            )
    steps = steps_for(sum(source.counts), batch_size, dp_size)
    if steps == 0:
        raise ValueError(
            f"{source.manifest_file}: {sum(source.counts)} records cannot fill one batch of "
            f"{batch_size} on each of {dp_size} ranks; lower batch_size or dp_size"
        )
    check_sizes(source)
    if verify:
        check_checksums(source)

    first_epoch, first_step = epoch + start_step // steps, start_step % steps
    end_epoch = None if num_epochs is None else epoch + num_epochs
    lanes = num_parallel_reads
    token_bytes = 2 if source.token_dtype == "uint16" else 4
    window = shuffle_buffer or default_window(source.seq_len, token_bytes)
    tf_dtype = DTYPES[source.token_dtype]
    seq_len = source.seq_len
    spec = _parse_spec(source, optional)
    counts = np.array(source.counts, dtype=np.int64)

    def plan_arrays(e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        e = int(e)
        p = plan_epoch(
            counts,
            batch_size,
            dp_rank=dp_rank,
            dp_size=dp_size,
            seed=seed,
            epoch=e,
            shuffle=shuffle,
            window=window,
            lanes=lanes,
            start_step=first_step if e == first_epoch else 0,
        )
        return p.reads, p.windows

    urls = tf.constant(list(source.urls))  # for error messages
    if tf_can_open(source.urls[0]):
        local_paths = [tf_path(u) for u in source.urls]
        literal = not any(c in p for p in local_paths for c in "*?[]{}\\")
        paths = tf.constant(local_paths)

        def shard_path(shard, count):
            return tf.gather(paths, shard)

    else:
        cache = ShardCache(source, cache_dir, keep=2 * lanes + 2)
        literal = True

        def shard_path(shard, count):
            path = tf.numpy_function(cache.fetch, [shard, count], tf.string, stateful=False)
            path.set_shape([])
            return path

    @_no_autograph
    def read(row):
        # row: (lane, shard index, first record, record count) -> windows of serialized records
        return _read_windows(
            shard_path(row[1], row[3]), row[2], row[3], window=window, read_buffer=read_buffer_bytes, literal=literal
        )

    @_no_autograph
    def parse_window(recs, meta):
        # recs: serialized records [n]; meta: (n, permutation key, records to drop, shard index)
        n = tf.size(recs, out_type=tf.int64)
        ok = tf.debugging.Assert(
            tf.equal(n, meta[0]),
            [
                "ShardIntegrityError:",
                tf.gather(urls, meta[3]),
                ": read",
                n,
                "records where the manifest promises",
                meta[0],
                "(the shard is truncated, corrupted or replaced; the read error is logged above)",
            ],
        )
        with tf.control_dependencies([ok]):
            parsed = tf.io.parse_example(recs, spec)
        # The window parsed in one call; token arrays stay in the shard's dtype until `finish`.
        out = {
            name: tf.reshape(tf.io.decode_raw(parsed[name], tf_dtype, little_endian=True), [-1, width])
            for name, width in ((records.TOKENS, seq_len + 1), *((name, seq_len) for name in optional))
        }
        out[records.VALID_LABELS] = parsed[records.VALID_LABELS]
        if shuffle:
            perm = tf.numpy_function(keyed_permutation, [meta[1], n], tf.int64, stateful=False)
            perm.set_shape([None])
            out = {name: tf.gather(value, perm) for name, value in out.items()}
        return {name: value[meta[2] :] for name, value in out.items()}

    @_no_autograph
    def epoch_dataset(e):
        reads, windows = tf.numpy_function(plan_arrays, [e], (tf.int64, tf.int64), stateful=False)
        reads = tf.reshape(reads, [-1, 4])
        windows = tf.reshape(windows, [-1, 5])

        @_no_autograph
        def lane_dataset(lane):
            mine = tf.boolean_mask(reads, tf.equal(reads[:, 0], lane))
            return tf.data.Dataset.from_tensor_slices(mine).flat_map(read)

        # Round-robin over the lanes, one window each, lanes read concurrently: the plan's order.
        # A resumed epoch starts at the lane of its first window, so the lanes are rotated.
        first_lane = tf.concat([windows[:1, 0], tf.zeros([1], tf.int64)], 0)[0]
        lane_order = tf.math.floormod(tf.range(lanes, dtype=tf.int64) + first_lane, lanes)
        chosen = tf.data.Dataset.from_tensor_slices(lane_order).interleave(
            lane_dataset, cycle_length=lanes, block_length=1, num_parallel_calls=lanes, deterministic=True
        )
        meta = tf.data.Dataset.from_tensor_slices(windows[:, 1:])
        parsed = tf.data.Dataset.zip((chosen, meta)).map(parse_window, num_parallel_calls=lanes, deterministic=True)
        return _rebatch(parsed, batch_size)

    @_no_autograph
    def finish(b):
        tokens = tf.reshape(tf.cast(b[records.TOKENS], tf.int32), [batch_size, seq_len + 1])
        valid = tf.reshape(b[records.VALID_LABELS], [batch_size, 1])
        out = {
            "inputs": tokens[:, :-1],
            "labels": tokens[:, 1:],
            "loss_mask": tf.cast(tf.range(seq_len, dtype=tf.int64)[None, :] < valid, tf.float32),
        }
        for name in optional:
            out[name] = tf.reshape(tf.cast(b[name], tf.int32), [batch_size, seq_len])
        return out

    last = tf.int64.max if end_epoch is None else max(end_epoch, first_epoch)
    ds = tf.data.Dataset.range(first_epoch, last).flat_map(epoch_dataset)
    ds = ds.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if end_epoch is not None:
        total = max(0, (end_epoch - first_epoch) * steps - first_step) if end_epoch > first_epoch else 0
        ds = ds.apply(tf.data.experimental.assert_cardinality(total))
    else:
        ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    ds = ds.with_options(options)
    log.info(
        "tfdata: %s rank %d/%d: %d shards, %d steps/epoch of %d, from epoch %d step %d",
        source.manifest_file,
        dp_rank,
        dp_size,
        len(source.urls),
        steps,
        batch_size,
        first_epoch,
        first_step,
    )
    return ds


def steps_per_epoch(manifest, batch_size: int, dp_size: int) -> int:
    """Batches every rank yields per epoch: total records // (batch_size * dp_size).

    Args:
        manifest: output directory, manifest.json path, or an already loaded manifest dict.
        batch_size: per-rank batch size.
        dp_size: number of data-parallel ranks.

    Returns:
        The number of steps (0 when the data cannot fill one batch per rank).
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
