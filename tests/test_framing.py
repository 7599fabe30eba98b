"""Blocks of TFRecord-framed records: what tokenize workers emit and shard writers copy."""

import os

import numpy as np

from pipeline.format.framing import FramedRecords, frame


def _records(n, seed=0):
    rng = np.random.default_rng(seed)
    return [os.urandom(int(rng.integers(0, 300))) for _ in range(n)]


def test_a_block_is_a_valid_tfrecord_file(tmp_path):
    import tensorflow as tf

    records = _records(50)
    block = FramedRecords.of(records)
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(block.parts()))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == records
    assert len(block) == 50 and len(block.data) == sum(len(frame(r)) for r in records)
    assert [block.payload(i) for i in range(len(block))] == records


def test_take_concat_and_ordered_parts_keep_every_record():
    a, b = _records(20, 1), _records(7, 2)
    block = FramedRecords.concat([FramedRecords.of(a), FramedRecords.of([]), FramedRecords.of(b)])
    both = a + b
    assert [block.payload(i) for i in range(len(block))] == both
    picked = block.take([26, 0, 5, 5])
    assert [picked.payload(i) for i in range(len(picked))] == [both[26], both[0], both[5], both[5]]
    order = list(reversed(range(len(block))))
    assert b"".join(block.parts(order)) == b"".join(frame(r) for r in reversed(both))
    assert len(FramedRecords.concat([])) == 0 and FramedRecords.concat([]).data == b""
