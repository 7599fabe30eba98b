"""Packing at read time: which document tokens fill each sequence, decided from document lengths alone.

A `Layout` describes n sequences of `seq_len` label positions before any token is read: its rows
``(sequence, label position, document, key, first token, tokens)`` in sequence order (a sequence's
rows fill its label positions from 0, back to back; the positions after them are padding), and each
sequence's *context*: the token before its first label (inputs are ``tokens[:-1]``, labels
``tokens[1:]``, as in pipeline/core/packing.py), a document token or the separator. A row is one
segment: segment ids number a sequence's rows 1, 2, ..., padding is 0; positions count from 0 within
each row. `key` is the document's place in the order it was read in (its position in the epoch's
order), which puts fragments back in that order. `fill` turns a layout into token arrays.

Two layouts, the job's two packings (docs/output-format.md), now made from a stream of documents:

* `concat_layout`: the documents back to back, labels [a, a + n * seq_len) of that stream cut into
  n sequences; sequence i's context is label a + i * seq_len - 1 (the separator before label 0), so
  consecutive sequences overlap by one token and every label of the stream is a label once.
* `best_fit_layout`: *fragments* (whole documents, or the rest of one from a token on) packed as
  pipeline/core/best_fit.py packs a window: a fragment longer than seq_len is cut into seq_len-token
  pieces, each a sequence of its own, and its last piece (fewer tokens) is an item; the items are
  placed by best fit decreasing (`best_fit.assign_sequences`). Sequences: the pieces first, in
  fragment order, then the best-fit sequences in the order they were opened, each holding its
  items in input order. A piece or item starting at a document's first token follows the
  separator, any other the token before it.

Worked example, seq_len = 4, documents A = [1 2 9] (doc 0) and B = [3 4 5 6 7 9] (doc 1):

    concat, a = 0, n = 2     sequence 0: context sep, labels 1 2 9 3   rows A[0:3], B[0:1]
                             sequence 1: context 3,   labels 4 5 6 7   rows B[1:5]
    best_fit                 piece  B[0:4]: context sep, labels 3 4 5 6
                             items  A (3 tokens), B[4:6] (2, context 6): A opens a sequence (room
                             1), B[4:6] does not fit, opens another: [1 2 9 pad], [7 9 pad pad]

    >>> lay = best_fit_layout([0, 1], [0, 1], [0, 0], [3, 6], 4)
    >>> lay.count, lay.doc.tolist(), lay.start.tolist(), lay.ctx_doc.tolist(), lay.ctx_tok.tolist()
    (3, [1, 0, 1], [0, 0, 4], [-1, -1, 1], [0, 0, 3])
    >>> tokens = {0: np.array([1, 2, 9]), 1: np.array([3, 4, 5, 6, 7, 9])}
    >>> def read(buf, at, docs, starts, lengths):
    ...     for o, d, s, n in zip(at, docs, starts, lengths):
    ...         buf[o : o + n] = tokens[d][s : s + n]
    >>> out = fill(lay, read, separator=9, pad=0)
    >>> out["tokens"].tolist(), out["segment_ids"].tolist()
    ([[9, 3, 4, 5, 6], [9, 1, 2, 9, 0], [6, 7, 9, 0, 0]], [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core import packing
from pipeline.core.best_fit import assign_sequences

SEPARATOR = -1  # ctx_doc of a sequence whose context is the separator token
_ROW_LABELS = 48  # mean labels per row from which segment ids are set a row at a time


def _int64(values) -> np.ndarray:
    return np.asarray(values, np.int64).reshape(-1)


@dataclasses.dataclass
class Layout:
    """n sequences of seq_len labels and the document tokens that fill them (see the module docstring).

    Attributes:
        seq_len: label positions per sequence.
        count: sequences.
        ctx_doc: int64 [n], the document of each sequence's context token, or SEPARATOR.
        ctx_tok: int64 [n], that token's index in its document (0 for the separator).
        seq, pos, doc, key, start, length: int64 [R], the rows, sorted by sequence then position.
    """

    seq_len: int
    count: int
    ctx_doc: np.ndarray
    ctx_tok: np.ndarray
    seq: np.ndarray
    pos: np.ndarray
    doc: np.ndarray
    key: np.ndarray
    start: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return self.count

    def used(self) -> np.ndarray:
        """Label positions each sequence fills (the rest is padding): int64 [n]."""
        return np.bincount(self.seq, self.length, minlength=self.count).astype(np.int64)

    def real(self) -> int:
        """Sequences holding at least one label (padding sequences come after them in a stream's end)."""
        return int(np.count_nonzero(np.bincount(self.seq, minlength=self.count)))

    def row_bounds(self) -> np.ndarray:
        """int64 [n + 1]: sequence s's rows are [bounds[s], bounds[s + 1])."""
        return np.searchsorted(self.seq, np.arange(self.count + 1, dtype=np.int64), side="left").astype(np.int64)

    def select(self, sequences) -> Layout:
        """The given sequences, in the given order, numbered 0.. (a sequence may be given once only)."""
        sequences = _int64(sequences)
        bounds = self.row_bounds()
        per = bounds[sequences + 1] - bounds[sequences]
        rows = packing.ranges(bounds[sequences], per)
        new_seq = np.repeat(np.arange(len(sequences), dtype=np.int64), per)
        return Layout(self.seq_len, len(sequences), self.ctx_doc[sequences], self.ctx_tok[sequences], new_seq,
                      self.pos[rows], self.doc[rows], self.key[rows], self.start[rows], self.length[rows])

    def segment_ids(self) -> np.ndarray:
        """Each row's segment id: 1 + its index among its sequence's rows."""
        bounds = self.row_bounds()
        return np.arange(len(self.seq), dtype=np.int64) - bounds[self.seq] + 1


def empty_layout(seq_len: int, count: int = 0) -> Layout:
    """`count` sequences of padding only (the context is the separator)."""
    z = np.zeros(0, np.int64)
    return Layout(seq_len, count, np.full(count, SEPARATOR, np.int64), np.zeros(count, np.int64), z, z, z, z, z, z)


def concat_layouts(parts: list[Layout]) -> Layout:
    """Layouts one after the other (their sequences renumbered)."""
    parts = [p for p in parts if p.count]
    if not parts:
        return empty_layout(0)
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [p.count for p in parts[:-1]])

    def cat(name):
        return np.concatenate([getattr(p, name) for p in parts])

    seq = np.concatenate([p.seq + o for p, o in zip(parts, offsets, strict=True)])
    return Layout(parts[0].seq_len, sum(p.count for p in parts), cat("ctx_doc"), cat("ctx_tok"), seq, cat("pos"),
                  cat("doc"), cat("key"), cat("start"), cat("length"))


@dataclasses.dataclass
class ConcatRun:
    """`count` sequences of a concat stream, described by its documents: rows are made only for those selected.

    docs, keys, label_starts, lengths: the stream's documents covering labels [first_label - 1,
    first_label + count * seq_len) (the label before, for the first context), in order, each
    starting where the previous one ends. end: the stream's end (labels from there on are padding),
    or None. A rank selects its sequences only: the rows of the others are never made.
    """

    seq_len: int
    count: int
    first_label: int
    end: int | None
    docs: np.ndarray
    keys: np.ndarray
    label_starts: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return self.count

    def real(self) -> int:
        """Sequences holding at least one label."""
        if self.end is None:
            return self.count
        return max(0, min(self.count, -(-(int(self.end) - self.first_label) // self.seq_len)))

    def select(self, sequences) -> Layout:
        """The given sequences, in the given order, as a `Layout`."""
        seqs = _int64(sequences)
        n, k = self.seq_len, len(seqs)
        s, e = self.label_starts, self.label_starts + self.lengths
        lo = self.first_label + seqs * n
        hi = lo + n if self.end is None else np.minimum(lo + n, int(self.end))
        live = hi > lo
        j0 = np.searchsorted(s, lo, side="right") - 1
        j1 = np.searchsorted(s, np.maximum(hi, lo + 1) - 1, side="right") - 1
        per = np.where(live, j1 - j0 + 1, 0)
        owner = np.repeat(np.arange(k, dtype=np.int64), per)
        d = packing.ranges(j0, per)
        r_lo = np.maximum(s[d], lo[owner])
        r_hi = np.minimum(e[d], hi[owner])
        c = lo - 1  # each sequence's context: the label before it (the separator before label 0)
        inside = (c >= 0) & (hi > lo)
        j = np.searchsorted(s, c[inside], side="right") - 1
        if len(j) and (int(j.min()) < 0 or np.any(c[inside] >= e[j])) or (len(d) and int(d.min()) < 0):
            raise ValueError("concat run: the documents do not cover the labels of a sequence and the one before")
        ctx_doc = np.full(k, SEPARATOR, np.int64)
        ctx_tok = np.zeros(k, np.int64)
        ctx_doc[inside] = self.docs[j]
        ctx_tok[inside] = c[inside] - s[j]
        return Layout(n, k, ctx_doc, ctx_tok, owner, r_lo - lo[owner], self.docs[d], self.keys[d], r_lo - s[d],
                      r_hi - r_lo)


def concat_layout(docs, keys, label_starts, lengths, first_label: int, count: int, seq_len: int,
                  end: int | None = None) -> Layout:
    """Labels [first_label, first_label + count * seq_len) of a stream of documents, as `count` sequences.

    Args:
        docs: the stream's documents covering labels [first_label - 1, first_label + count *
            seq_len) (the label before, for the first context), in order.
        keys: their keys (their places in the order they were read in).
        label_starts: each document's first label in the stream (consecutive: each starts where
            the previous one ends).
        lengths: each document's tokens.
        first_label: the first label of the first sequence (0: its context is the separator).
        count: sequences.
        seq_len: labels per sequence.
        end: the stream's end (labels from there on are padding), or None.

    Returns:
        The layout.
    """
    run = ConcatRun(seq_len, count, int(first_label), end, _int64(docs), _int64(keys), _int64(label_starts),
                    _int64(lengths))
    return run.select(np.arange(count))


class Stacked:
    """Layouts (or concat runs) one after the other, their sequences numbered across them; selected lazily."""

    def __init__(self, parts: list):
        self.parts = [p for p in parts if p.count]
        self.seq_len = parts[0].seq_len if parts else 0
        self.bounds = np.cumsum([0] + [p.count for p in self.parts]).astype(np.int64)
        self.count = int(self.bounds[-1])

    def __len__(self) -> int:
        return self.count

    def real(self) -> int:
        """Sequences holding at least one label."""
        return sum(p.real() for p in self.parts)

    def select(self, sequences) -> Layout:
        """The given sequences, in the given order, as a `Layout`."""
        seqs = _int64(sequences)
        part = np.searchsorted(self.bounds, seqs, side="right") - 1
        chosen, where = [], []
        for i in np.unique(part).tolist():
            at = np.flatnonzero(part == i)
            chosen.append(self.parts[i].select(seqs[at] - self.bounds[i]))
            where.append(at)
        if not chosen:
            return empty_layout(self.seq_len)
        joined = concat_layouts(chosen)
        order = np.empty(len(seqs), np.int64)
        order[np.concatenate(where)] = np.arange(len(seqs))
        return joined.select(order) if len(chosen) > 1 else joined


def best_fit_layout(docs, keys, starts, lengths, seq_len: int) -> Layout:
    """Fragments (document, key, first token, tokens), in input order, packed by best fit (module docstring)."""
    return BestFitPack(docs, keys, starts, lengths, seq_len).layout()


class BestFitPack:
    """Fragments packed by best fit (`best_fit_layout`): the count at once, the rows when first selected.

    A stream's ranks all need every packing window's count; only the ranks reading a window's
    sequences need its rows.
    """

    def __init__(self, docs, keys, starts, lengths, seq_len: int):
        self.fragments = (_int64(docs), _int64(keys), _int64(starts), _int64(lengths))
        lengths = self.fragments[3]
        if len(lengths) and int(lengths.min()) < 1:
            raise ValueError("fragments hold at least one token")
        self.seq_len = seq_len
        self._full = lengths // seq_len
        rest = lengths - self._full * seq_len
        self._where, self._opened = assign_sequences(rest[rest > 0], seq_len)
        self.count = int(self._full.sum()) + self._opened
        self._layout: Layout | None = None

    def __len__(self) -> int:
        return self.count

    def real(self) -> int:
        """Sequences holding at least one label (all of them)."""
        return self.count

    def select(self, sequences) -> Layout:
        """The given sequences, in the given order, as a `Layout`."""
        return self.layout().select(sequences)

    def layout(self) -> Layout:
        """The packing's rows (made once)."""
        if self._layout is None:
            self._layout = self._rows()
        return self._layout

    def _rows(self) -> Layout:
        (docs, keys, starts, lengths), seq_len, full = self.fragments, self.seq_len, self._full
        where, opened = self._where, self._opened
        rest = lengths - full * seq_len
        # Pieces: piece p of fragment f starts at starts[f] + p * seq_len; one sequence each.
        p_owner = np.repeat(np.arange(len(lengths)), full)
        p_start = starts[p_owner] + (np.arange(len(p_owner)) - np.repeat(np.cumsum(full) - full, full)) * seq_len
        n_pieces = len(p_owner)
        # Items: each fragment's last piece of fewer than seq_len tokens.
        has = rest > 0
        i_doc, i_key = docs[has], keys[has]
        i_start, i_len = (starts + full * seq_len)[has], rest[has]
        order = np.argsort(where, kind="stable")  # by sequence, then input order
        per_seq = np.bincount(where, minlength=opened)
        firsts = np.cumsum(per_seq) - per_seq
        i_len_o = i_len[order]
        before = np.cumsum(i_len_o) - i_len_o  # tokens of the items before, over all sequences
        pos = before - np.repeat(before[firsts], per_seq)
        seq = np.concatenate([np.arange(n_pieces), n_pieces + where[order]]).astype(np.int64)
        rows = (seq, np.concatenate([np.zeros(n_pieces, np.int64), pos]),
                np.concatenate([docs[p_owner], i_doc[order]]), np.concatenate([keys[p_owner], i_key[order]]),
                np.concatenate([p_start, i_start[order]]), np.concatenate([np.full(n_pieces, seq_len), i_len_o]))
        # A sequence's context: the separator when its first row starts a document, else the token before.
        first_row = np.concatenate([np.arange(n_pieces), n_pieces + firsts]).astype(np.int64)
        f_doc, f_start = rows[2][first_row], rows[4][first_row]
        ctx_doc = np.where(f_start > 0, f_doc, SEPARATOR).astype(np.int64)
        ctx_tok = np.where(f_start > 0, f_start - 1, 0).astype(np.int64)
        return Layout(seq_len, n_pieces + opened, ctx_doc, ctx_tok, *(np.asarray(x, np.int64) for x in rows))


def leftover(layout: Layout, consumed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fragments of sequences [consumed, count): (docs, keys, starts, lengths) in input order.

    Rows of one document that follow each other in it are joined into one fragment, so that a
    document cut at one seq_len is cut anew at another.
    """
    bounds = layout.row_bounds()
    first = int(bounds[consumed]) if consumed < layout.count else len(layout.seq)
    doc, key, start, length = (x[first:] for x in (layout.doc, layout.key, layout.start, layout.length))
    order = np.lexsort((start, key))
    doc, key, start, length = doc[order], key[order], start[order], length[order]
    if not len(doc):
        return doc, key, start, length
    joins = np.concatenate([[False], (doc[1:] == doc[:-1]) & (key[1:] == key[:-1])
                            & (start[1:] == start[:-1] + length[:-1])])
    group = np.cumsum(~joins) - 1
    heads = np.flatnonzero(~joins)
    return doc[heads], key[heads], start[heads], np.bincount(group, length).astype(np.int64)


def loss_mask(used, seq_len: int) -> np.ndarray:
    """float32 [..., seq_len]: 1 on the label positions a sequence fills (`used`), 0 on padding."""
    used = np.asarray(used)
    return (np.arange(seq_len) < used[..., None]).astype(np.float32)


def fill(layout: Layout, read_into, *, separator: int, pad: int, dtype=np.int32,
         features: bool = True) -> dict[str, np.ndarray]:
    """The layout's token arrays.

    Args:
        layout: the sequences.
        read_into: `read_into(buffer, offsets, docs, starts, lengths)` copies tokens [starts[i],
            starts[i] + lengths[i]) of document docs[i] into buffer[offsets[i]:] (the caller's I/O).
        separator: the context of a sequence that starts a stream or a document.
        pad: the token of padding positions.
        dtype: the tokens' (the store's: the reads go straight into the array).
        features: also return segment ids and positions.

    Returns:
        {"tokens": dtype [n, seq_len + 1], "used": int64 [n] (label positions filled: `loss_mask`),
        "segment_ids", "positions": `packing.segment_dtype(seq_len)` [n, seq_len] (0 on padding;
        with `features`)}.
    """
    n, seq_len = layout.count, layout.seq_len
    used = layout.used()
    bounds = layout.row_bounds()
    # Reads go straight into the tokens array: sequence i's context at [i, 0], its labels after it.
    padded = not n or int(used.min()) < seq_len
    tokens = np.full((n, seq_len + 1), pad, dtype) if padded else np.empty((n, seq_len + 1), dtype)
    base = np.arange(n, dtype=np.int64) * (seq_len + 1)
    ctx_reads = layout.ctx_doc >= 0
    first = bounds[:-1]
    has_rows = bounds[1:] > first
    # A context that is the token just before the sequence's first row is read with that row.
    glued = np.zeros(n, bool)
    fr = first[has_rows]
    glued[has_rows] = ctx_reads[has_rows] & (layout.doc[np.minimum(fr, len(layout.doc) - 1)] == layout.ctx_doc[
        has_rows]) & (layout.start[np.minimum(fr, len(layout.doc) - 1)] == layout.ctx_tok[has_rows] + 1)
    row_off = base[layout.seq] + 1 + layout.pos
    r_start, r_len = layout.start.copy(), layout.length.copy()
    glued_rows = first[glued]
    r_start[glued_rows] -= 1
    r_len[glued_rows] += 1
    row_off[glued_rows] -= 1
    alone = ctx_reads & ~glued
    offsets = np.concatenate([row_off, base[alone]])
    docs = np.concatenate([layout.doc, layout.ctx_doc[alone]])
    starts = np.concatenate([r_start, layout.ctx_tok[alone]])
    lengths = np.concatenate([r_len, np.ones(int(alone.sum()), np.int64)])
    flat = tokens.reshape(-1)
    flat[base[~ctx_reads]] = separator
    if len(offsets):
        order = np.argsort(offsets, kind="stable")
        read_into(flat, offsets[order], docs[order], starts[order], lengths[order])
    out = {"tokens": tokens, "used": used}
    if features:
        out["segment_ids"], out["positions"] = _segments(layout, used, padded)
    return out


def _segments(layout: Layout, used: np.ndarray, padded: bool) -> tuple[np.ndarray, np.ndarray]:
    """Segment ids and positions of a layout's label positions (0 on padding), in `packing.segment_dtype`."""
    n, seq_len = layout.count, layout.seq_len
    kind = packing.segment_dtype(seq_len)
    rows = len(layout.seq)
    if rows * _ROW_LABELS <= n * seq_len:  # long rows: a slice each costs less than passes over every label
        seg = np.zeros((n, seq_len), kind)
        pos = np.zeros((n, seq_len), kind)
        ramp = np.arange(seq_len, dtype=kind)
        ids = layout.segment_ids().tolist()
        for s, p, k, g in zip(layout.seq.tolist(), layout.pos.tolist(), layout.length.tolist(), ids, strict=True):
            seg[s, p : p + k] = g
            pos[s, p : p + k] = ramp[:k]
        return seg, pos
    # Each row starts a segment: a running count of starts is the segment id, the distance to the
    # last start the position (as pipeline/core/packing.segment_features).
    begins = np.zeros((n, seq_len), bool)
    begins[layout.seq, layout.pos] = True
    seg = np.cumsum(begins, axis=1, dtype=kind)
    index = np.arange(seq_len, dtype=kind)
    pos = np.where(begins, index, kind.type(0))
    np.maximum.accumulate(pos, axis=1, out=pos)
    np.subtract(index, pos, out=pos)
    if padded:
        pads = np.arange(seq_len)[None, :] >= used[:, None]
        seg[pads] = 0
        pos[pads] = 0
    return seg, pos
