import numpy as np
import pytest

from pipeline.format import records


@pytest.mark.parametrize("dtype", [np.dtype("<u2"), np.dtype("<i4")])
@pytest.mark.parametrize("with_segments", [False, True])
@pytest.mark.parametrize("valid", [None, 3, 0])
def test_serialization_is_byte_identical_to_tf_example(dtype, with_segments, valid):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 60000, 9)
    seg = rng.integers(0, 5, 8) if with_segments else None
    pos = rng.integers(0, 8, 8) if with_segments else None
    ours = records.serialize_example(tokens, seg, pos, valid, dtype)

    feature = {"tokens": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tokens.astype(dtype).tobytes()]))}
    if with_segments:
        feature["segment_ids"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[seg.astype(dtype).tobytes()]))
        feature["positions"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[pos.astype(dtype).tobytes()]))
    if valid is not None:
        feature["valid_labels"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[valid]))
    expected = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)
    assert ours == expected


def test_records_parse_back_with_tf_io():
    import tensorflow as tf

    tokens = np.arange(1000, 1017)
    serialized = [records.serialize_example(tokens), records.serialize_example(tokens, valid_labels=5)]
    parsed = tf.io.parse_example(
        serialized,
        {
            "tokens": tf.io.FixedLenFeature([], tf.string),
            "valid_labels": tf.io.FixedLenFeature([], tf.int64, default_value=16),
        },
    )
    ids = tf.io.decode_raw(parsed["tokens"], tf.uint16, little_endian=True)
    np.testing.assert_array_equal(ids.numpy()[0], tokens)
    assert parsed["valid_labels"].numpy().tolist() == [16, 5]


def test_dtype_follows_vocabulary_size():
    assert records.token_dtype_for(32000) == np.dtype("<u2")
    assert records.token_dtype_for(65536) == np.dtype("<u2")
    assert records.token_dtype_for(65537) == np.dtype("<i4")
    assert records.dtype_name(np.dtype("<i4")) == "int32"
