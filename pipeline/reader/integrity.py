"""One exception type for every damaged-shard problem, before step 0 or while reading.

Before step 0 the reader's checks run in Python and raise `ShardIntegrityError` directly. While
reading, the checks run inside the tf.data graph, where only TensorFlow errors can be raised: a
shard that reads short, fails a CRC or vanished surfaces as a `tf.errors.InvalidArgumentError`
whose message carries ``ShardIntegrityError: <path>: <problem>``. `integrity_error` turns such an
error back into a `ShardIntegrityError`, and `shard_errors()` does it around a block of training
code, so that training code catches one type::

    with tfdata.shard_errors():
        model.fit(ds, ...)            # or a custom loop
    # raises ShardIntegrityError(path, problem) from the original tf.errors.OpError
"""

from __future__ import annotations

import contextlib
import re

import tensorflow as tf

from pipeline.reader.engine.errors import MARKER, ShardIntegrityError

_IN_MESSAGE = re.compile(MARKER + r": (?P<path>.+?): (?P<problem>read -?\d+ (?:records|tokens)[^\]\n]*)")


def short_read_message(path, read, expected) -> tf.Tensor:
    """The in-graph message for a read of `read` records where `expected` were due (string tensor)."""
    return tf.strings.join([
        MARKER + ": ", path, ": read ", tf.strings.as_string(read), " records where the manifest promises ",
        tf.strings.as_string(expected),
        " (the shard is truncated, corrupted, replaced or gone; the read error is logged above)",
    ])


def integrity_error(error: BaseException) -> ShardIntegrityError | None:
    """The `ShardIntegrityError` an error raised while iterating a reader dataset stands for, or None."""
    if isinstance(error, ShardIntegrityError):
        return error
    if not isinstance(error, tf.errors.OpError):
        return None
    found = _IN_MESSAGE.search(error.message or "")
    if found is None:
        return None
    return ShardIntegrityError(found.group("path"), found.group("problem").strip())


@contextlib.contextmanager
def shard_errors():
    """Re-raise integrity failures of reader datasets inside the block as `ShardIntegrityError`."""
    try:
        yield
    except tf.errors.OpError as e:
        converted = integrity_error(e)
        if converted is None:
            raise
        raise converted from e
