"""The decoder LM (trainers/model.py) and its optimizer (trainers/optim.py), on this environment's
TensorFlow (2.21 / Keras 3 in the main virtualenv; the Horovod test runs the same code on 2.15 /
Keras 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from trainers.loss import masked_lm_loss
from trainers.model import PRESETS, ModelConfig, attention_mask, build_model, count_params, model_config
from trainers.optim import AdamW, WarmupCosine

V, L = 61, 12


@pytest.fixture(scope="module")
def tiny():
    tf.keras.utils.set_random_seed(0)
    return build_model(model_config("tiny", vocab_size=V, max_seq_len=L))


def _tokens(seed: int, shape=(2, L)) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).integers(0, V, size=shape), tf.int32)


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("preset,overrides", [("tiny", {}), ("small", {"n_layers": 1}),
                                              ("tiny", {"d_model": 48, "n_heads": 3, "d_ff": 80})])
def test_parameter_count_matches_the_built_model(preset, overrides, tie):
    cfg = model_config(preset, vocab_size=V, max_seq_len=L, tie_embeddings=tie, **overrides)
    assert count_params(build_model(cfg)) == cfg.num_params()


def test_xl_width_count_and_the_billion_parameter_config():
    # One block at the 1.3B model's width, built: the per-block count is right at full width.
    one = model_config("xl", vocab_size=1000, max_seq_len=64, n_layers=1)
    assert count_params(build_model(one)) == one.num_params()
    # The full config (Llama-2 vocabulary, 2,048 positions): ~1.3B, linear in the number of blocks.
    xl = model_config("xl", vocab_size=32000, max_seq_len=2048)
    per_block = model_config("xl", vocab_size=32000, max_seq_len=2048, n_layers=2).num_params() - \
        model_config("xl", vocab_size=32000, max_seq_len=2048, n_layers=1).num_params()
    assert xl.num_params() == model_config("xl", 32000, 2048, n_layers=1).num_params() + 23 * per_block
    assert 1.25e9 < xl.num_params() < 1.35e9
    assert 1.3e9 < model_config("xl", vocab_size=50257, max_seq_len=2048).num_params() < 1.35e9
    sizes = [model_config(p, 32000, 2048).num_params() for p in ("small", "medium", "large", "xl")]
    assert sizes == sorted(sizes) and 0.1e9 < sizes[0] < 0.15e9


def test_config_errors_say_how_to_fix():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        ModelConfig(vocab_size=10, max_seq_len=4, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown model preset"):
        model_config("huge", 10, 4)
    with pytest.raises(ValueError, match="dropout"):
        ModelConfig(vocab_size=10, max_seq_len=4, dropout=1.0)
    assert set(PRESETS) == {"tiny", "small", "medium", "large", "xl"}


def test_attention_mask_worked_example():
    mask = attention_mask(4, tf.constant([[1, 1, 2, 2]])).numpy().astype(int)[0]
    np.testing.assert_array_equal(mask, [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(attention_mask(3).numpy()[0], np.tril(np.ones((3, 3), bool)))


def test_causal_no_position_sees_the_future(tiny):
    x = _tokens(1)
    y = tf.concat([x[:, :5], _tokens(2)[:, 5:]], axis=1)  # same first 5 tokens, different future
    a, b = tiny(x).numpy(), tiny(y).numpy()
    np.testing.assert_allclose(a[:, :5], b[:, :5], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 5:], b[:, 5:])
    assert a.shape == (2, L, V) and a.dtype == np.float32


def test_documents_in_a_packed_record_do_not_see_each_other(tiny):
    seg = tf.constant([[1] * 5 + [2] * 7] * 2)
    pos = tf.constant([list(range(5)) + list(range(7))] * 2)
    x = _tokens(3)
    y = tf.concat([_tokens(4)[:, :5], x[:, 5:]], axis=1)  # another first document
    a = tiny(x, segment_ids=seg, positions=pos).numpy()
    b = tiny(y, segment_ids=seg, positions=pos).numpy()
    np.testing.assert_allclose(a[:, 5:], b[:, 5:], rtol=1e-5, atol=1e-5)
    # ... and the second document is computed as if it started the record.
    alone = tiny(x[:, 5:]).numpy()
    np.testing.assert_allclose(a[:, 5:], alone, rtol=1e-4, atol=1e-5)


def test_dropout_is_a_function_of_the_seed():
    tf.keras.utils.set_random_seed(0)
    model = build_model(model_config("tiny", V, L, dropout=0.3))
    x = _tokens(5)
    s1, s2 = tf.constant([1, 2], tf.int64), tf.constant([1, 3], tf.int64)
    a = model(x, training=True, dropout_seed=s1).numpy()
    np.testing.assert_array_equal(a, model(x, training=True, dropout_seed=s1).numpy())
    assert not np.allclose(a, model(x, training=True, dropout_seed=s2).numpy())
    np.testing.assert_array_equal(model(x).numpy(), model(x, training=False, dropout_seed=s1).numpy())


def test_mixed_precision_computes_in_bfloat16_with_float32_weights():
    tf.keras.utils.set_random_seed(0)
    full = build_model(model_config("tiny", V, L))
    mixed = build_model(model_config("tiny", V, L, mixed_precision=True))
    assert all(tf.as_dtype(v.dtype) == tf.float32 for v in mixed.trainable_variables)
    block = mixed.decoder.blocks[0]
    assert tf.as_dtype(block.ff_in.compute_dtype) == tf.bfloat16
    for dst, src in zip(mixed.trainable_variables, full.trainable_variables, strict=True):
        dst.assign(src)
    x = _tokens(6)
    a, b = full(x).numpy(), mixed(x).numpy()
    assert b.dtype == np.float32
    assert not np.array_equal(a, b)  # really computed at lower precision
    np.testing.assert_allclose(a, b, atol=0.05)
    # bf16 gradients flow to float32 variables.
    with tf.GradientTape() as tape:
        loss = masked_lm_loss(mixed(x, training=True), x, tf.ones(x.shape))
    grads = tape.gradient(loss, mixed.trainable_variables)
    assert all(g is not None and tf.as_dtype(g.dtype) == tf.float32 for g in grads)


def test_masked_loss_ignores_padding():
    logits = tf.random.stateless_normal([2, 4, V], seed=[0, 1])
    labels = tf.constant([[1, 2, 3, 4], [5, 6, 7, 8]])
    mask = tf.constant([[1, 1, 1, 1], [1, 1, 0, 0]], tf.float32)
    other = tf.constant([[1, 2, 3, 4], [5, 6, 9, 9]])  # differs only under the mask's zeros
    a = float(masked_lm_loss(logits, labels, mask))
    assert a == pytest.approx(float(masked_lm_loss(logits, other, mask)))
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits).numpy()
    assert a == pytest.approx((ce[0].sum() + ce[1, :2].sum()) / 6, rel=1e-6)
    assert float(masked_lm_loss(logits, labels, mask, denominator=3.0)) == pytest.approx(a * 2, rel=1e-6)


def test_checkpoint_holds_every_model_variable(tmp_path):
    # Keras 3 hides list attributes from tf.train.Checkpoint; the blocks must not live in one.
    model = build_model(model_config("tiny", V, L, n_layers=3))
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    stored = [n for n, _ in tf.train.list_variables(path) if n.startswith("model/")]
    assert len(stored) == len(model.variables) == len(model.trainable_variables)
    assert any("block_2" in n for n in stored)


def test_warmup_cosine_worked_example():
    lr = WarmupCosine(1e-3, warmup_steps=2, total_steps=6, min_ratio=0.1)
    got = [float(lr(s)) for s in range(6)]
    np.testing.assert_allclose(got, [5e-4, 1e-3, 1e-3, 7.75e-4, 3.25e-4, 1e-4], rtol=1e-5)


def test_adamw_matches_a_numpy_reference():
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    b0 = np.array([0.1, -0.2], np.float32)
    w, b = tf.Variable(w0), tf.Variable(b0)
    opt = AdamW(0.1, beta_1=0.9, beta_2=0.95, epsilon=1e-8, weight_decay=0.1, clip_norm=None)
    opt.build([w, b])
    grads = [np.array([[0.1, 0.2], [-0.3, 0.4]], np.float32), np.array([1.0, -1.0], np.float32)]
    ref = {"w": w0.astype(np.float64), "b": b0.astype(np.float64)}
    m = {k: 0.0 for k in ref}
    v = {k: 0.0 for k in ref}
    for t in (1, 2):
        opt.apply_gradients(zip([tf.constant(g) for g in grads], [w, b], strict=True))
        for k, g in zip(("w", "b"), grads, strict=True):
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.95 * v[k] + 0.05 * g * g
            update = (m[k] / (1 - 0.9**t)) / (np.sqrt(v[k] / (1 - 0.95**t)) + 1e-8)
            if k == "w":
                update = update + 0.1 * ref[k]  # decoupled decay on matrices only
            ref[k] = ref[k] - 0.1 * update
    np.testing.assert_allclose(w.numpy(), ref["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), ref["b"], rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 2


def test_adamw_clips_by_global_norm_and_reports_it():
    w = tf.Variable(tf.zeros([3]))
    opt = AdamW(1.0, weight_decay=0.0, clip_norm=1.0)
    opt.build([w])
    norm = opt.apply_gradients([(tf.constant([3.0, 4.0, 0.0]), w)])
    assert float(norm) == pytest.approx(5.0)
    # Adam's first step moves every coordinate by ~lr * sign(g), whatever the clipping.
    np.testing.assert_allclose(w.numpy(), [-1.0, -1.0, 0.0], atol=1e-6)
    assert math.isfinite(float(norm))
