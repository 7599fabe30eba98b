"""The reader's Keras form: `model.fit` trains on it, the loss mask is the sample weight, and a damaged
shard surfaces as ShardIntegrityError through `shard_errors()`. Runs on TF 2.21 (Keras 3) and on the
Horovod environment's TF 2.15 (Keras 2).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from synthetic_output import VOCAB_SIZE, write_output

from pipeline import tfdata

SEQ_LEN = 8


@pytest.fixture()
def out(tmp_path):
    d = str(tmp_path / "out")
    write_output(d, [40, 30], seq_len=SEQ_LEN, padded_record=5, padded_valid=3)
    return d


def _model():
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.layers.Embedding(VOCAB_SIZE, 8), tf.keras.layers.Dense(VOCAB_SIZE)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.slow
def test_model_fit_trains_on_the_keras_form(out):
    ds = tfdata.make_dataset(out, 4, seed=1, keras=True, features=(), num_epochs=None)
    x, y, w = ds.element_spec
    assert x.shape == y.shape == w.shape == (4, SEQ_LEN) and w.dtype == tf.float32
    model = _model()
    history = model.fit(ds, steps_per_epoch=17, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0] - 0.5, losses


def test_the_loss_mask_is_the_sample_weight(out):
    model = _model()
    # Shuffle off, batch 16: the padded record (id 5, 3 real labels) is in the first batch.
    keras_ds = tfdata.make_dataset(out, 16, shuffle=False, shuffle_buffer=16, keras=True, features=())
    dict_ds = tfdata.make_dataset(out, 16, shuffle=False, shuffle_buffer=16, features=())
    first = next(iter(dict_ds))
    assert first["loss_mask"].numpy().sum() == 16 * SEQ_LEN - (SEQ_LEN - 3)
    evaluated = model.evaluate(keras_ds, verbose=0)
    by_hand = []
    for b in dict_ds:
        ce = tf.keras.losses.sparse_categorical_crossentropy(b["labels"], model(b["inputs"]), from_logits=True)
        by_hand.append(float(tf.reduce_sum(ce * b["loss_mask"])) / ce.shape.num_elements())
    assert evaluated == pytest.approx(np.mean(by_hand), rel=1e-4)


def test_with_document_boundaries_x_is_a_dict(out):
    x, _, _ = tfdata.make_dataset(out, 2, seed=1, keras=True).element_spec
    assert set(x) == {"inputs", "segment_ids", "positions"}


def test_model_fit_on_a_damaged_shard_raises_one_error_type(out):
    path = os.path.join(out, "train-00001-of-00002.tfrecord")
    size = os.path.getsize(path) // 30
    with open(path, "r+b") as f:
        f.seek(7 * size + size // 2)
        byte = f.read(1)
        f.seek(7 * size + size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    model = _model()
    with pytest.raises(tfdata.ShardIntegrityError) as e:
        with tfdata.shard_errors():
            model.fit(tfdata.make_dataset(out, 2, shuffle=False, keras=True, features=()), verbose=0)
    assert e.value.path == path
