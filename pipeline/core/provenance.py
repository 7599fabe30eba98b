"""Source spans: which document tokens a run of packed label tokens holds (for "which documents were in step k").

A token stream being packed is a run of document pieces; its *spans* say where each piece comes
from, in stream order, one int64 row each:

    (file_index, line, first_token, tokens)

meaning `tokens` label tokens taken from the document on `line` (1-based) of input file
`file_index`, starting at its token `first_token`. Token offsets count the document as packed: its
BOS (when added), its ids, its EOS (when added). The rows' `tokens` add up to the stream's length,
so cutting a stream at label k (packing cuts records every seq_len labels) cuts its spans at k too.

    >>> s = document_spans(3, [10, 11], [4, 2])   # two documents of 4 and 2 tokens
    >>> head, tail = split_spans(s, 5)
    >>> head.tolist(), tail.tolist()
    ([[3, 10, 0, 4], [3, 11, 0, 1]], [[3, 11, 1, 1]])
"""

from __future__ import annotations

import numpy as np

FIELDS = ("file_index", "line", "first_token", "tokens")
_EMPTY = np.zeros((0, 4), np.int64)


def empty() -> np.ndarray:
    """No spans."""
    return _EMPTY.copy()


def document_spans(file_index: int, lines, lengths) -> np.ndarray:
    """Spans of whole documents packed one after another (lengths as packed, BOS/EOS included)."""
    lines = np.asarray(lines, np.int64)
    lengths = np.asarray(lengths, np.int64)
    keep = lengths > 0
    n = int(keep.sum())
    return np.stack([np.full(n, file_index, np.int64), lines[keep], np.zeros(n, np.int64), lengths[keep]], axis=1)


def concat_spans(parts) -> np.ndarray:
    """Spans of streams joined end to end."""
    parts = [p for p in parts if len(p)]
    return np.concatenate(parts).astype(np.int64) if parts else empty()


def split_spans(spans: np.ndarray, at: int) -> tuple[np.ndarray, np.ndarray]:
    """The spans of labels [0, at) and of labels [at, end) of a stream."""
    spans = np.asarray(spans, np.int64).reshape(-1, 4)
    ends = np.cumsum(spans[:, 3])
    i = int(np.searchsorted(ends, at, side="right"))  # spans[:i] end at or before `at`
    head, tail = spans[:i], spans[i:].copy()
    inside = at - (int(ends[i - 1]) if i else 0)  # labels of span i before the cut
    if len(tail) and inside:
        part = tail[0].copy()
        part[3] = inside
        head = np.concatenate([head, part[None, :]])
        tail[0, 2] += inside
        tail[0, 3] -= inside
    return head, tail


def cut(spans: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The spans of labels [start, stop) of a stream."""
    return split_spans(split_spans(spans, stop)[0], start)[1]
