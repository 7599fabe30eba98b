"""The language-model loss both trainers use, and the model's inputs from a reader batch.

Token-level cross-entropy over label positions with `loss_mask == 1` (padding excluded). The
data-parallel trainer divides by the number of real tokens averaged over all ranks, so that the
averaged gradient is the gradient of the global token mean whatever the padding on each rank.
"""

from __future__ import annotations

import tensorflow as tf


def token_losses(logits, labels):
    """Cross-entropy per label position: logits [B, L, V] float32, labels [B, L] -> [B, L]."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def masked_lm_loss(logits, labels, loss_mask, denominator=None):
    """sum(ce * loss_mask) / denominator; the denominator defaults to sum(loss_mask) (at least 1).

    Args:
        logits: float32 [B, L, V].
        labels: int32 [B, L].
        loss_mask: float32 [B, L], 0 on padding.
        denominator: optional scalar, e.g. the mean number of real tokens per rank, which turns the
            ranks' averaged gradients into the gradient of the global token mean.

    Returns:
        Scalar float32 loss.
    """
    mask = tf.cast(loss_mask, tf.float32)
    total = tf.reduce_sum(token_losses(logits, labels) * mask)
    if denominator is None:
        denominator = tf.reduce_sum(mask)
    return total / tf.maximum(tf.cast(denominator, tf.float32), 1.0)


def model_inputs(batch: dict, use_document_boundaries: bool) -> dict:
    """Keyword arguments for the model from a reader batch."""
    kwargs = {}
    if use_document_boundaries:
        if "segment_ids" in batch:
            kwargs["segment_ids"] = batch["segment_ids"]
        if "positions" in batch:
            kwargs["positions"] = batch["positions"]
    return kwargs
