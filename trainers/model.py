"""A GPT-style decoder-only language model that runs on Keras 2 (TF 2.15) and Keras 3 (TF 2.21).

    inputs [B, L] int32 (token ids), optional segment_ids / positions [B, L] from the reader
      -> token embedding [B, L, D] + position embedding (positions, or 0..L-1)  -> dropout
      -> n_layers x DecoderBlock (pre-layer-norm, as GPT-2/3):
             x = x + dropout(proj(attention(LN(x), causal [and same-segment] mask)))
             x = x + dropout(W2 gelu(W1 LN(x)))
      -> final LN -> logits = x E^T (tied head) or Dense(V)       [B, L, V], always float32

Only APIs present in both Keras generations are used: `tf.keras.layers.{Layer, Dense, Embedding,
LayerNormalization}`, `add_weight`-free layers built in `build()`, `tf.*` ops for everything else.
Dropout is stateless (`tf.nn.experimental.stateless_dropout`) with a seed the trainer derives from
(seed, step, rank), so a resumed run draws the same masks as an uninterrupted one.

Mixed precision: `ModelConfig(mixed_precision=True)` gives every layer the `mixed_bfloat16`
policy (float32 variables, bfloat16 matmuls); softmax, layer norm statistics and the logits are
float32. bfloat16 needs no loss scaling.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

# GPT-3 paper (Brown et al. 2020, Table 2.1) shapes; "tiny" is for tests. With the Llama-2
# vocabulary (32,000), 2,048 positions and a tied head: small 111M, medium 337M, large 732M, xl 1.28B
# (with GPT-2's 50,257: 125M, 356M, 760M, 1.32B). ModelConfig.num_params gives the exact number;
# tests check it against the built model.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64},
    "small": {"d_model": 768, "n_layers": 12, "n_heads": 12, "d_ff": 3072},
    "medium": {"d_model": 1024, "n_layers": 24, "n_heads": 16, "d_ff": 4096},
    "large": {"d_model": 1536, "n_layers": 24, "n_heads": 16, "d_ff": 6144},
    "xl": {"d_model": 2048, "n_layers": 24, "n_heads": 16, "d_ff": 8192},
}

_NEG_INF = -1e9  # added to masked attention scores (float32), exp() underflows to exactly 0


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of the decoder; `model_config(preset, ...)` builds one from a preset."""

    vocab_size: int  # from the manifest's tokenizer.vocab_size
    max_seq_len: int  # position-embedding rows; >= the manifest's seq_len
    d_model: int = 32  # width of the residual stream
    n_layers: int = 2  # decoder blocks
    n_heads: int = 2  # attention heads; d_model % n_heads == 0
    d_ff: int = 64  # hidden width of the feed-forward network (4 * d_model in GPT-3)
    dropout: float = 0.0  # on embeddings, attention probabilities and both residual branches
    tie_embeddings: bool = True  # LM head = token embedding transposed (no extra V x D matrix)
    mixed_precision: bool = False  # bfloat16 compute, float32 variables
    layer_norm_epsilon: float = 1e-5
    init_stddev: float = 0.02  # N(0, 0.02); residual projections scaled by 1/sqrt(2 n_layers)

    def __post_init__(self):
        for name in ("vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads", "d_ff"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: pick n_heads "
                f"among the divisors of d_model (head size d_model / n_heads)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def dtype_policy(self) -> str:
        """Keras dtype policy name for every layer (the same string works in Keras 2 and 3)."""
        return "mixed_bfloat16" if self.mixed_precision else "float32"

    def num_params(self) -> int:
        """Trainable parameters of the model this config builds (checked against the built model).

        Per block: two layer norms (2 * 2D), QKV (D*3D + 3D), output projection (D*D + D),
        feed-forward (D*F + F + F*D + D). Plus token (V*D) and position (L*D) embeddings, the final
        layer norm (2D) and, when the head is not tied, V*D for the head.
        """
        d, f, v = self.d_model, self.d_ff, self.vocab_size
        per_block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f + f * d + d)
        total = v * d + self.max_seq_len * d + self.n_layers * per_block + 2 * d
        if not self.tie_embeddings:
            total += v * d
        return total

    def to_dict(self) -> dict:
        """JSON-ready form (written next to checkpoints)."""
        return dataclasses.asdict(self)


def model_config(preset: str, vocab_size: int, max_seq_len: int, **overrides) -> ModelConfig:
    """A ModelConfig from a named preset (`PRESETS`), with any field overridden."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {sorted(PRESETS)}")
    fields = {**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return ModelConfig(vocab_size=vocab_size, max_seq_len=max_seq_len, **fields)


def attention_mask(seq_len, segment_ids=None):
    """Boolean [B or 1, L, L]: may query i attend to key j.

    Yes iff j <= i and, given segment ids, both lie in the same packed document (padding has
    segment 0 and attends only to padding).

    Example, L=4, segment_ids [[1, 1, 2, 2]] -> row i lists the keys query i sees:
        [[1 0 0 0]
         [1 1 0 0]
         [0 0 1 0]
         [0 0 1 1]]
    """
    q = tf.range(seq_len)[:, None]
    k = tf.range(seq_len)[None, :]
    causal = (k <= q)[None]  # [1, L, L]
    if segment_ids is None:
        return causal
    same = tf.equal(segment_ids[:, :, None], segment_ids[:, None, :])  # [B, L, L]
    return tf.logical_and(causal, same)


def _dropout(x, rate: float, training, seed):
    """Dropout that is a pure function of `seed` ([2] int) when one is given."""
    if not training or rate == 0.0:
        return x
    if seed is None:
        return tf.nn.dropout(x, rate=rate)
    stateless = getattr(tf.nn.experimental, "stateless_dropout", None)  # TF >= 2.7
    if stateless is not None:
        return stateless(x, rate=rate, seed=seed)
    keep = tf.random.stateless_uniform(tf.shape(x), seed=seed, dtype=tf.float32) >= rate
    return tf.where(keep, x / tf.cast(1.0 - rate, x.dtype), tf.zeros_like(x))


def _fold(seed, index: int):
    """A distinct seed for each dropout site, derived from the step seed."""
    if seed is None:
        return None
    fold_in = getattr(tf.random.experimental, "stateless_fold_in", None)  # TF >= 2.7
    if fold_in is not None:
        return fold_in(seed, index)
    # Older TF: hash (seed, index) into a new seed with the stateless generator itself.
    salted = tf.cast(seed, tf.int64) + tf.constant([0, 1], tf.int64) * (index + 1)
    return tf.random.stateless_uniform([2], seed=salted, minval=None, maxval=None, dtype=tf.int64)


def _normal(stddev: float):
    return tf.keras.initializers.RandomNormal(mean=0.0, stddev=stddev)


class CausalSelfAttention(tf.keras.layers.Layer):
    """Multi-head self-attention under a boolean mask; scores and softmax in float32."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(dtype=config.dtype_policy, **kwargs)
        self._cfg = config
        out_std = config.init_stddev / math.sqrt(2 * config.n_layers)
        self.qkv = tf.keras.layers.Dense(
            3 * config.d_model, kernel_initializer=_normal(config.init_stddev),
            dtype=config.dtype_policy, name="qkv",
        )
        self.proj = tf.keras.layers.Dense(
            config.d_model, kernel_initializer=_normal(out_std), dtype=config.dtype_policy, name="proj"
        )

    def build(self, input_shape):
        """Create the projections' weights for inputs [B, L, D]."""
        self.qkv.build(input_shape)
        self.proj.build(input_shape)
        self.built = True

    def call(self, x, attention_mask, training=False, dropout_seed=None):
        """Attend: x [B, L, D], attention_mask bool [B or 1, L, L] -> [B, L, D]."""
        cfg = self._cfg
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        qkv = tf.reshape(self.qkv(x), [batch, length, 3, cfg.n_heads, cfg.head_dim])
        q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))  # each [B, H, L, Dh]
        scores = tf.cast(tf.matmul(q, k, transpose_b=True), tf.float32) * (1.0 / math.sqrt(cfg.head_dim))
        scores = tf.where(attention_mask[:, None, :, :], scores, _NEG_INF)  # [B, H, L, L]
        probs = tf.nn.softmax(scores, axis=-1)
        probs = _dropout(probs, cfg.dropout, training, dropout_seed)
        out = tf.matmul(tf.cast(probs, v.dtype), v)  # [B, H, L, Dh]
        out = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [batch, length, cfg.d_model])
        return self.proj(out)


class DecoderBlock(tf.keras.layers.Layer):
    """One pre-layer-norm transformer decoder block."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(dtype=config.dtype_policy, **kwargs)
        self._cfg = config
        policy, eps = config.dtype_policy, config.layer_norm_epsilon
        out_std = config.init_stddev / math.sqrt(2 * config.n_layers)
        self.ln_1 = tf.keras.layers.LayerNormalization(epsilon=eps, dtype=policy, name="ln_1")
        self.attn = CausalSelfAttention(config, name="attn")
        self.ln_2 = tf.keras.layers.LayerNormalization(epsilon=eps, dtype=policy, name="ln_2")
        self.ff_in = tf.keras.layers.Dense(
            config.d_ff, kernel_initializer=_normal(config.init_stddev), dtype=policy, name="ff_in"
        )
        self.ff_out = tf.keras.layers.Dense(
            config.d_model, kernel_initializer=_normal(out_std), dtype=policy, name="ff_out"
        )

    def build(self, input_shape):
        """Create every sublayer's weights for inputs [B, L, D]."""
        self.ln_1.build(input_shape)
        self.attn.build(input_shape)
        self.ln_2.build(input_shape)
        self.ff_in.build(input_shape)
        self.ff_out.build(list(input_shape[:-1]) + [self._cfg.d_ff])
        self.built = True

    def call(self, x, attention_mask, training=False, dropout_seed=None):
        """One block: x [B, L, D] -> [B, L, D]."""
        rate = self._cfg.dropout
        h = self.attn(self.ln_1(x), attention_mask=attention_mask, training=training,
                      dropout_seed=_fold(dropout_seed, 0))
        x = x + _dropout(h, rate, training, _fold(dropout_seed, 1))
        h = self.ff_out(tf.nn.gelu(self.ff_in(self.ln_2(x)), approximate=True))
        return x + _dropout(h, rate, training, _fold(dropout_seed, 2))


class DecoderStack(tf.keras.layers.Layer):
    """Embeddings, the decoder blocks, the final layer norm and the LM head: the whole network.

    A layer rather than a model so that the Keras model (`DecoderLM`) and SageMaker's
    `smp.DistributedModel` subclass (trainers/train_smp.py) share it unchanged.
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(dtype=config.dtype_policy, **kwargs)
        self._cfg = config
        policy = config.dtype_policy
        self.token_embedding = tf.keras.layers.Embedding(
            config.vocab_size, config.d_model, embeddings_initializer=_normal(config.init_stddev),
            dtype=policy, name="token_embedding",
        )
        self.position_embedding = tf.keras.layers.Embedding(
            config.max_seq_len, config.d_model, embeddings_initializer=_normal(config.init_stddev),
            dtype=policy, name="position_embedding",
        )
        # One attribute per block, not a list: Keras 3 wraps list attributes in a container that
        # tf.train.Checkpoint does not see, and the blocks would silently be left out of checkpoints.
        for i in range(config.n_layers):
            setattr(self, f"block_{i}", DecoderBlock(config, name=f"block_{i}"))
        self.ln_f = tf.keras.layers.LayerNormalization(
            epsilon=config.layer_norm_epsilon, dtype=policy, name="ln_f"
        )
        self.lm_head = None
        if not config.tie_embeddings:
            self.lm_head = tf.keras.layers.Dense(
                config.vocab_size, use_bias=False, kernel_initializer=_normal(config.init_stddev),
                dtype=policy, name="lm_head",
            )

    @property
    def blocks(self) -> list[DecoderBlock]:
        """The decoder blocks, in order."""
        return [getattr(self, f"block_{i}") for i in range(self._cfg.n_layers)]

    def build(self, input_shape):
        """Create every weight for token ids [B, L]."""
        hidden = list(input_shape) + [self._cfg.d_model]
        self.token_embedding.build(input_shape)
        self.position_embedding.build(input_shape)
        for block in self.blocks:
            block.build(hidden)
        self.ln_f.build(hidden)
        if self.lm_head is not None:
            self.lm_head.build(hidden)
        self.built = True

    def call(self, inputs, segment_ids=None, positions=None, training=False, dropout_seed=None):
        """Token ids [B, L] -> float32 logits [B, L, V].

        Args:
            inputs: int32 token ids [B, L], L <= max_seq_len.
            segment_ids: optional int [B, L] document ids of a packed record (0 = padding); when
                given, attention stays inside each document.
            positions: optional int [B, L] position of each token inside its document; when given,
                position embeddings restart at each document (else 0..L-1).
            training: enables dropout.
            dropout_seed: optional int [2]; makes dropout a pure function of it.
        """
        cfg = self._cfg
        length = tf.shape(inputs)[1]
        if positions is None:
            positions = tf.range(length)[None, :]  # [1, L], broadcast over the batch
        x = self.token_embedding(inputs) + self.position_embedding(positions)  # [B, L, D]
        x = _dropout(x, cfg.dropout, training, _fold(dropout_seed, 0))
        mask = attention_mask(length, segment_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, attention_mask=mask, training=training, dropout_seed=_fold(dropout_seed, i + 1))
        x = self.ln_f(x)
        if self.lm_head is None:
            table = tf.cast(self.token_embedding.embeddings, x.dtype)  # [V, D]
            logits = tf.matmul(x, table, transpose_b=True)
        else:
            logits = self.lm_head(x)
        return tf.cast(logits, tf.float32)


class DecoderLM(tf.keras.Model):
    """The language model: a Keras model around `DecoderStack`."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.model_config = config
        self.decoder = DecoderStack(config, name="decoder")

    def build(self, input_shape):
        """Create every weight for token ids [B, L]."""
        self.decoder.build(input_shape)
        self.built = True

    def call(self, inputs, segment_ids=None, positions=None, training=False, dropout_seed=None):
        """See `DecoderStack.call`."""
        return self.decoder(inputs, segment_ids=segment_ids, positions=positions, training=training,
                            dropout_seed=dropout_seed)


def build_model(config: ModelConfig) -> DecoderLM:
    """Construct the model and create its weights (one forward pass on a [1, 2] dummy batch)."""
    model = DecoderLM(config, name="decoder_lm")
    length = min(2, config.max_seq_len)
    model(tf.zeros([1, length], tf.int32), training=False)
    return model


def count_params(model: tf.keras.Model) -> int:
    """Number of trainable scalars in a built model."""
    return int(sum(math.prod(int(d) for d in v.shape) for v in model.trainable_variables))
