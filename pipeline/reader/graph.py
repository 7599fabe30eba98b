"""The tf.data graph both TFRecord readers share: pieces of shards -> one element per batch of a rank.

`window_pipeline` turns a dataset of pieces (rows of PIECE_FIELDS: a window's run of records within
one shard, window after window) into one element per batch: each piece is read at its byte offset
into one batch of serialized records (`num_parallel_reads` pieces in flight, in order; the TFRecord
reader checks every record's CRC), checked against the record count the plan expects, parsed in one
`parse_example` call; a window's pieces are joined once, put in batch order (one gather, a
permutation computed once per window) and converted (int32 `inputs`/`labels`, float `loss_mask`);
each batch is a slice of its window's arrays. `finish` adds what every reader dataset ends with:
replica batches for tf.distribute, the Keras form, the cardinality and the options.
"""

from __future__ import annotations

import tensorflow as tf

from pipeline.format import records
from pipeline.reader.engine.request import OPTIONAL_FEATURES
from pipeline.reader.integrity import short_read_message
from pipeline.reader.shards import ShardCache, tf_can_open, tf_path

no_autograph = tf.autograph.experimental.do_not_convert
# A row of the plan's pieces: a run of consecutive records of one shard (its bytes from byte_offset),
# and the window it belongs to (epoch, window index, batches, records the resume drops, whether the
# piece is the window's last).
PIECE_FIELDS = ("shard", "byte_offset", "records", "bytes", "epoch", "window", "batches", "drop", "ends_window")
_SHARD, _OFFSET, _RECORDS, _BYTES, _EPOCH, _WINDOW, _BATCHES, _DROP, ENDS_WINDOW = range(len(PIECE_FIELDS))


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


def records_at(path, offset, count, buffer_size) -> tf.data.Dataset:
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



def parse_spec(seq_len: int, optional: tuple[str, ...], best_fit: bool) -> tuple[tuple, dict]:
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



def window_pipeline(pieces, urls_list, cache_source, gather, spec, widths, tf_dtype, seq_len, rank_batch,
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
        recs = _ignore_errors(records_at(files, offset, piece[_RECORDS], buffer)).batch(piece[_RECORDS])
        recs = recs.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string))).take(1)
        return tf.data.Dataset.zip((recs, tf.data.Dataset.from_tensors(path), tf.data.Dataset.from_tensors(piece)))

    @no_autograph
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

    @no_autograph
    def join(acc, parsed_piece):
        # Emits (window complete?, its pieces' arrays so far, piece). A window's first piece starts
        # from emptied lists (resized to 0 after the previous window's last piece): no tf.cond.
        part, piece = parsed_piece
        joined = {}
        for name, handle in acc[1].items():
            keep = tf.cast(1 - acc[0], tf.int32) * tf.raw_ops.TensorListLength(input_handle=handle)
            handle = tf.raw_ops.TensorListResize(input_handle=handle, size=keep)
            joined[name] = tf.raw_ops.TensorListPushBack(input_handle=handle, tensor=part[name])
        return (piece[ENDS_WINDOW], joined), (piece[ENDS_WINDOW], joined, piece)

    def concat(lists):
        return {name: tf.raw_ops.TensorListConcatV2(
            input_handle=handle, element_shape=tf.constant(shapes[name], tf.int32),
            leading_dims=tf.zeros([0], tf.int64), element_dtype=dtypes[name])[0] for name, handle in lists.items()}

    @no_autograph
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


UNKNOWN = -1  # `finish`'s total for a dataset whose number of steps is known only at its end


def finish(ds, rank_batch, element_batch, keras, total, sharded) -> tf.data.Dataset:
    """Replica batches, the Keras form, the cardinality (`total` steps, None: infinite, UNKNOWN), options."""
    per_step = rank_batch // element_batch
    if per_step > 1:  # tf.distribute: the pipeline's slice, cut into its replicas' batches
        ds = _rebatch(ds, element_batch)
    if keras:
        ds = ds.map(keras_form, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if total == UNKNOWN:
        pass
    elif total is not None:
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


def keras_form(batch: dict) -> tuple:
    """(x, y, sample_weight): x = inputs (with segment_ids/positions, a dict), y = labels."""
    extra = {name: batch[name] for name in OPTIONAL_FEATURES if name in batch}
    x = {"inputs": batch["inputs"], **extra} if extra else batch["inputs"]
    return x, batch["labels"], batch["loss_mask"]
