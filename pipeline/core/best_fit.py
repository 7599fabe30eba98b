"""Best-fit-decreasing packing of whole documents over a bounded window; padding instead of cuts.

The alternative to concatenate-and-chunk (pipeline/core/packing.py): a document of at most
`seq_len` tokens (its BOS/EOS included) goes whole into one sequence. A longer one is cut into
`seq_len`-token pieces, each a sequence of its own, and only its last piece (fewer than `seq_len`
tokens) is packed with others. Those *items* (whole documents and last pieces) are taken in input
order, `window` at a time; each window is packed by best fit decreasing (largest item first, into
the open sequence with the least room that still fits it, else a new one), and the room left in
each sequence is padding.

Record convention. A sequence is a record of `seq_len + 1` tokens, as for concat: inputs are
`tokens[:-1]`, labels `tokens[1:]`, so a record has `seq_len` label positions. Records no longer
overlap: `tokens[0]`, the *context*, is the token before the first item's first label: the
separator (EOS, or BOS without EOS) when that item starts a document, the preceding token of the
document when it is a piece of a cut document (so the pieces of a document overlap by one token,
as concat's records do). Inside a record the items follow one another in input order; an item
after the first follows the previous item's last label (its EOS), as in concat. The label positions
after the last item are padding: token `pad_id`, segment id 0, position 0. Segment ids number the
items of a record 1, 2, ...; positions count from 0 within each item. The loss mask is
`segment_ids > 0`: 1 on every real label, 0 on every padding label. So every document token is a
label, with weight 1, exactly once, and padding is never learned.

Worked example, seq_len = 4, separator = EOS = 9, pad id 0, documents A = [1 2 9], B = [3 9],
C = [4 5 6 7 8 9] (6 tokens: cut into [4 5 6 7] and the last piece [8 9], context 7), D = [1 9]:

    items by size     A(3)  B(2)  C'(2)  D(2)              (ties: input order)
    best fit          A -> new 0 (room 1); B -> new 1 (room 2); C' -> 1 (room 0); D -> new 2
    record            tokens          segment ids   positions
    C's piece         9 4 5 6 7       1 1 1 1       0 1 2 3
    sequence 0        9 1 2 9 0       1 1 1 0       0 1 2 0
    sequence 1        9 3 9 8 9       1 1 2 2       0 1 0 1
    sequence 2        9 1 9 0 0       1 1 0 0       0 1 0 0

    >>> stream = packing.build_stream([np.array(d) for d in ([1, 2, 9], [3, 9], [4, 5, 6, 7, 8, 9], [1, 9])], 9)
    >>> out, rest = pack_documents(stream, [3, 2, 6, 2], seq_len=4, window=4, pad_id=0, final=True)
    >>> out.tokens.tolist()
    [[9, 4, 5, 6, 7], [9, 1, 2, 9, 0], [9, 3, 9, 8, 9], [9, 1, 9, 0, 0]]
    >>> out.segment_ids.tolist()
    [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 2, 2], [1, 1, 0, 0]]
    >>> out.positions.tolist()
    [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 0, 1], [0, 1, 0, 0]]
    >>> out.padding, out.documents_cut, len(rest)
    (3, 1, 0)

Windows and state. `pack_documents` packs a run of documents given in input order (a work item's,
in line order): the full pieces of cut documents become records at once; the items are packed
window by window. With `final=True` the last window, however short, is packed too and nothing
crosses to the next run: each work item is packed on its own, so the output depends on the input
and its cut into work items only, never on how the work was spread. With `final=False` the last
window, when it holds fewer than `window` items, is returned as the leftover (`Items`: fewer than
`window` items of at most `seq_len` tokens each), to be joined with others in input order
(`concat_items`) and packed again (`pack_items`), as concat joins its remainders; that pays only
where a work item holds many windows. Besides the run's own stream and records, the working memory
is one window of items and its sequences.

Provenance: `Packed.spans` cover every label position of the records in order, `seq_len` per
record; padding positions are rows `(PAD_FILE, 0, 0, n)`, so record j of a block holds the block's
label positions [j * seq_len, (j + 1) * seq_len) as for concat.

Counts: padding labels and documents cut, per subset when the caller names each document's subset.
A sequence's padding is charged to the subset of its largest item (the one that opened it).
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from pipeline.core import best_fit_kernel, packing, provenance

DEFAULT_WINDOW = 1024  # items per window: <= 1% padding at seq_len 2048 and 4096 (docs/benchmarks.md)
PAD_FILE = -1  # the file index of provenance rows that stand for padding
_BIN_BITS = best_fit_kernel.BIN_BITS  # a sequence's room and its index share one sorted integer key
_VIEW_TOKENS = 64  # mean item length from which a view per item costs less than a gather


@dataclasses.dataclass
class Items:
    """Whole documents and last pieces of cut ones awaiting best-fit packing, in input order.

    labels:   int32, the items' tokens back to back.
    lengths:  int64 per item, each in [1, seq_len].
    contexts: int32 per item, the token before its first label.
    subsets:  str per item (its document's subset), or None when not counted.
    spans:    provenance spans of `labels` (pipeline/core/provenance.py), or None.
    """

    labels: np.ndarray
    lengths: np.ndarray
    contexts: np.ndarray
    subsets: np.ndarray | None = None
    spans: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, first: int, stop: int) -> Items:
        """Items [first, stop)."""
        bounds = np.concatenate([[0], np.cumsum(self.lengths)])
        a, b = int(bounds[first]), int(bounds[stop])
        return Items(self.labels[a:b], self.lengths[first:stop], self.contexts[first:stop],
                     None if self.subsets is None else self.subsets[first:stop],
                     None if self.spans is None else provenance.cut(self.spans, a, b))


def empty_items(with_subsets: bool = False, with_spans: bool = False) -> Items:
    """No items."""
    return Items(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int32),
                 np.zeros(0, str) if with_subsets else None, provenance.empty() if with_spans else None)


def concat_items(parts: list[Items]) -> Items:
    """Leftovers joined in the order given (the input order of their documents)."""
    if not parts:
        return empty_items()
    subsets = spans = None
    if all(p.subsets is not None for p in parts):
        subsets = np.concatenate([p.subsets for p in parts])
    if all(p.spans is not None for p in parts):
        spans = provenance.concat_spans([p.spans for p in parts])
    return Items(np.concatenate([p.labels for p in parts]).astype(np.int32, copy=False),
                 np.concatenate([p.lengths for p in parts]).astype(np.int64, copy=False),
                 np.concatenate([p.contexts for p in parts]).astype(np.int32, copy=False), subsets, spans)


@dataclasses.dataclass
class Packed:
    """Packed records: tokens [k, seq_len + 1], segment_ids and positions [k, seq_len].

    tokens are int32 unless the packing was asked for another dtype (the records' token dtype, which
    saves the writer a conversion); segment ids and positions are `packing.segment_dtype(seq_len)`.
    spans: provenance of every label position, padding as PAD_FILE rows (None: not recorded).
    counts: {subset: {"padding_labels": n, "documents_cut": m}} (empty when subsets are not named).
    """

    tokens: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    padding: int = 0
    documents_cut: int = 0
    spans: np.ndarray | None = None
    counts: dict = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def loss_mask(self) -> np.ndarray:
        """1 on real labels, 0 on padding."""
        return (self.segment_ids > 0).astype(np.float32)


def _add_counts(into: dict, counts: dict) -> None:
    for subset, c in counts.items():
        mine = into.setdefault(subset, {"padding_labels": 0, "documents_cut": 0})
        for key, value in c.items():
            mine[key] += value


def concat_packed(parts: list[Packed], seq_len: int) -> Packed:
    """Records of several packings, in order, with their counts summed."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return _Records(seq_len, 0, False).packed()
    if len(parts) == 1:
        return parts[0]
    counts: dict = {}
    for p in parts:
        _add_counts(counts, p.counts)
    spans = None
    if all(p.spans is not None for p in parts):
        spans = provenance.concat_spans([p.spans for p in parts])
    return Packed(np.concatenate([p.tokens for p in parts]), np.concatenate([p.segment_ids for p in parts]),
                  np.concatenate([p.positions for p in parts]), sum(p.padding for p in parts),
                  sum(p.documents_cut for p in parts), spans, counts)


def _cut_spans(spans: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spans of label ranges [starts[i], starts[i] + lengths[i]) (each >= 1), and each row's range."""
    spans = np.asarray(spans, np.int64).reshape(-1, 4)
    ends = np.cumsum(spans[:, 3])
    begins = ends - spans[:, 3]
    starts = np.asarray(starts, np.int64)
    stops = starts + np.asarray(lengths, np.int64)
    lo = np.searchsorted(ends, starts, side="right")  # first span ending after the range's start
    hi = np.searchsorted(begins, stops, side="left")  # spans beginning before its stop
    row = packing.ranges(lo, hi - lo)
    owner = np.repeat(np.arange(len(starts)), hi - lo)
    first = np.maximum(begins[row], starts[owner])
    last = np.minimum(ends[row], stops[owner])
    out = spans[row].copy()
    out[:, 2] += first - begins[row]
    out[:, 3] = last - first
    return out, owner


class _Records:
    """Records being packed, in order; their arrays are made once, at the end (`packed`).

    A record is its context token, runs of labels (views of the items' arrays) and padding; its
    segments are (segment id, length) pairs adding up to seq_len, padding as id 0. Views and pairs
    instead of arrays per window: the tokens are copied once, into the final array and dtype, and
    segment ids and positions are two np.repeat of the pairs, with no [k, seq_len] temporaries
    (a window of short items is gathered into one int32 block instead: see `_VIEW_TOKENS`).
    """

    def __init__(self, seq_len: int, pad_id: int, with_spans: bool, dtype=np.int32):
        self.seq_len = seq_len
        self._pad = np.full(seq_len, pad_id, np.int32)
        self._dtype = np.dtype(dtype)
        self._runs: list[np.ndarray] = []
        self._ids: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self.spans: list[np.ndarray] | None = [] if with_spans else None  # per block, in record order
        self.count = 0
        self.padding = 0
        self.documents_cut = 0
        self.counts: dict = {}

    def add_pieces(self, labels: np.ndarray, starts: np.ndarray, firsts: np.ndarray, separator: np.ndarray) -> None:
        """Full pieces labels[s : s + seq_len] of cut documents, each a record of its own.

        A document's first piece follows the separator (`firsts`), a later one the label before it.
        """
        n = self.seq_len
        runs = self._runs
        for start, first in zip(starts.tolist(), firsts.tolist(), strict=True):
            if first:
                runs.append(separator)
                runs.append(labels[start : start + n])
            else:
                runs.append(labels[start - 1 : start + n])
        k = len(starts)
        self._ids.append(np.ones(k, np.int64))
        self._lengths.append(np.full(k, n, np.int64))
        self.count += k

    def add_window(self, items: Items) -> None:
        """All the items into sequences by best fit decreasing (`assign_sequences`), padded."""
        n, seq_len = len(items), self.seq_len
        if not n:
            return
        where, count = assign_sequences(items.lengths, seq_len)
        lengths = items.lengths
        order = np.argsort(where, kind="stable")  # by sequence, then input order
        seq_of, size = where[order], lengths[order]
        per_seq = np.bincount(seq_of, minlength=count)
        firsts = np.cumsum(per_seq) - per_seq  # in `order`: each sequence's first item
        ends = firsts + per_seq
        item_starts = np.cumsum(lengths) - lengths
        pad = seq_len - np.bincount(where, lengths, minlength=count).astype(np.int64)
        contexts = items.contexts[order[firsts]]
        if int(lengths.sum()) >= _VIEW_TOKENS * n:
            labels, runs, filler = items.labels, self._runs, self._pad
            starts_in_order, sizes = item_starts[order].tolist(), size.tolist()
            for r, (a, b, p) in enumerate(zip(firsts.tolist(), ends.tolist(), pad.tolist(), strict=True)):
                runs.append(contexts[r : r + 1])
                for start, length in zip(starts_in_order[a:b], sizes[a:b], strict=True):
                    runs.append(labels[start : start + length])
                if p:
                    runs.append(filler[:p])
        else:
            # Short items: a view each would cost more than copying the window's records once.
            # Items sorted by sequence fill each sequence's first seq_len - pad positions in
            # row-major order, so one boolean mask places every label.
            block = np.empty((count, seq_len + 1), np.int32)
            block[:, 0] = contexts
            real = np.arange(seq_len)[None, :] < (seq_len - pad)[:, None]
            body = block[:, 1:]
            body[~real] = self._pad[0]
            body[real] = items.labels[packing.ranges(item_starts[order], size)]
            self._runs.append(block.reshape(-1))
        # Segments: a sequence's items (ids 1, 2, ...) then its padding (id 0, maybe of length 0).
        ids = np.zeros(n + count, np.int64)
        seg_lengths = np.empty(n + count, np.int64)
        at = np.arange(n) + seq_of
        ids[at] = np.arange(n) - np.repeat(firsts, per_seq) + 1
        seg_lengths[at] = size
        seg_lengths[ends + np.arange(count)] = pad
        self._ids.append(ids)
        self._lengths.append(seg_lengths)
        self.count += count
        self.padding += int(pad.sum())
        if items.subsets is not None:
            # A sequence's padding goes to the subset of the item that opened it (its largest).
            placed = np.argsort(-lengths, kind="stable")
            opener = np.empty(count, np.int64)
            opener[where[placed][::-1]] = placed[::-1]  # the first write of each sequence wins
            names, inverse = np.unique(items.subsets[opener], return_inverse=True)
            per = np.bincount(inverse, pad, minlength=len(names)).astype(np.int64)
            _add_counts(self.counts, {str(s): {"padding_labels": int(p), "documents_cut": 0}
                                      for s, p in zip(names, per, strict=True)})
        if self.spans is not None and items.spans is not None:
            rows, owner = _cut_spans(items.spans, item_starts[order], size)
            pads = np.flatnonzero(pad)
            pad_rows = np.stack([np.full(len(pads), PAD_FILE), np.zeros(len(pads), np.int64),
                                 np.zeros(len(pads), np.int64), pad[pads]], axis=1)
            # Rows in record order: a sequence's items' rows, then its padding row.
            keys = np.concatenate([seq_of[owner] * 2, pads * 2 + 1])
            self.spans.append(np.concatenate([rows, pad_rows])[np.argsort(keys, kind="stable")].astype(np.int64))

    def packed(self) -> Packed:
        """The records so far as arrays."""
        k, n = self.count, self.seq_len
        tokens = np.empty((k, n + 1), self._dtype)
        if self._runs:
            np.concatenate(self._runs, out=tokens.reshape(-1), casting="unsafe")
        ids = np.concatenate(self._ids) if self._ids else np.zeros(0, np.int64)
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        dtype = packing.segment_dtype(n)
        segment_ids = np.repeat(ids.astype(dtype), lengths).reshape(k, n)
        # A segment's positions count from its start in the record: every record holds seq_len labels,
        # so a segment's start in its record is its start in all of them modulo seq_len.
        starts = np.cumsum(lengths) - lengths
        positions = np.repeat((starts % max(n, 1)).astype(dtype), lengths).reshape(k, n)
        np.subtract(np.arange(n, dtype=dtype), positions, out=positions)
        padding = (ids == 0) & (lengths > 0)
        positions.reshape(-1)[packing.ranges(starts[padding], lengths[padding])] = 0
        spans = None if self.spans is None else provenance.concat_spans(self.spans)
        return Packed(tokens, segment_ids, positions, self.padding, self.documents_cut, spans, self.counts)


def _split(records: _Records, stream: packing.Piece, sizes, subsets=None) -> Items:
    """Add the full pieces of the run's cut documents to `records`; the items to pack (see split_documents)."""
    seq_len = records.seq_len
    sizes = np.asarray(sizes, np.int64)
    if int(sizes.sum()) != len(stream):
        raise ValueError(f"document sizes add up to {int(sizes.sum())}, the stream holds {len(stream)} labels")
    keep = sizes > 0
    sizes = sizes[keep]
    subsets = None if subsets is None else np.asarray(subsets, str)[keep]
    labels = np.asarray(stream.labels, np.int32)
    separator = np.array([stream.context], np.int32)
    starts = np.cumsum(sizes) - sizes
    full = sizes // seq_len
    rest = sizes - full * seq_len
    # Full pieces: piece p of document d starts at label starts[d] + p * seq_len.
    piece_doc = np.repeat(np.arange(len(sizes)), full)
    piece_index = np.arange(len(piece_doc)) - np.repeat(np.cumsum(full) - full, full)
    piece_start = starts[piece_doc] + piece_index * seq_len
    records.add_pieces(labels, piece_start, piece_index == 0, separator)
    cut = sizes > seq_len
    records.documents_cut += int(cut.sum())
    if records.spans is not None and stream.spans is not None:
        records.spans.append(_cut_spans(stream.spans, piece_start, np.full(len(piece_start), seq_len))[0])
    if subsets is not None:
        names, inverse = np.unique(subsets, return_inverse=True)
        per = np.bincount(inverse, cut, minlength=len(names)).astype(np.int64)
        _add_counts(records.counts, {str(n): {"padding_labels": 0, "documents_cut": int(c)}
                                     for n, c in zip(names, per, strict=True)})
    # Items: every document's last (or only) piece of fewer than seq_len + 1 tokens.
    has_item = rest > 0
    item_start = (starts + full * seq_len)[has_item]
    item_len = rest[has_item]
    contexts = np.where(full[has_item] > 0, labels[np.maximum(item_start - 1, 0)], separator[0]).astype(np.int32)
    if int(item_len.sum()) >= _VIEW_TOKENS * len(item_len) > 0:  # long items: a slice each, no index array
        item_labels = np.concatenate([labels[a : a + m] for a, m in zip(item_start.tolist(), item_len.tolist(),
                                                                        strict=True)])
    else:
        item_labels = labels[packing.ranges(item_start, item_len)]
    items = Items(item_labels, item_len, contexts, None if subsets is None else subsets[has_item])
    if stream.spans is not None:
        items.spans = _cut_spans(stream.spans, item_start, item_len)[0] if len(item_len) else provenance.empty()
    return items


def split_documents(stream: packing.Piece, sizes, seq_len: int, subsets=None) -> tuple[Packed, Items]:
    """A run of documents -> the records of cut documents' full pieces, and the items to pack.

    Args:
        stream: the documents back to back (`packing.build_stream_flat`), context = the separator.
        sizes: each document's tokens as packed (BOS/EOS included), adding up to len(stream).
        seq_len: label positions per record.
        subsets: each document's subset (str), or None.
    """
    records = _Records(seq_len, 0, stream.spans is not None)
    items = _split(records, stream, sizes, subsets)
    return records.packed(), items


def assign_sequences(lengths: np.ndarray, seq_len: int, compiled: bool = True) -> tuple[np.ndarray, int]:
    """Best fit decreasing: the sequence of each item (lengths in [1, seq_len]), and how many.

    Items are placed largest first (ties in input order), each into the open sequence with the least
    room that fits it (ties: the one opened first), else into a new one. Sequences are numbered in
    the order they are opened. `compiled`: place many items with pipeline/core/best_fit_kernel.py
    where numba is installed (the same decisions as the loop below).

    >>> assign_sequences(np.array([3, 2, 2, 2]), 4)
    (array([0, 1, 1, 2]), 3)
    """
    lengths = np.asarray(lengths, np.int64)
    n = len(lengths)
    if n and (int(lengths.min()) < 1 or int(lengths.max()) > seq_len):
        raise ValueError(f"item lengths must be in [1, {seq_len}]")
    order = np.argsort(-lengths, kind="stable")
    where = np.empty(n, np.int64)
    # Items longer than half a sequence never share one with each other: each opens its own.
    big = int(np.count_nonzero(lengths > seq_len // 2))
    where[order[:big]] = np.arange(big)
    room = seq_len - lengths[order[:big]]
    # Open sequences as sorted keys room << 32 | index: the first key >= L << 32 is the best fit.
    keys = sorted(((room[room > 0] << _BIN_BITS) | np.flatnonzero(room > 0)).tolist())
    opened = big
    small = lengths[order[big:]]
    if compiled and len(small) >= best_fit_kernel.MIN_ITEMS:
        placed = best_fit_kernel.place_items(keys, small, seq_len, opened)
        if placed is not None:
            where[order[big:]] = placed[0]
            return where, placed[1]
    mask = (1 << _BIN_BITS) - 1
    # A sequence opened now has the most room of all (seq_len - L >= seq_len / 2 > any big item's
    # room, and earlier items were no smaller), so its key goes last; the one an item goes into
    # only loses room, so its new key goes before the old one's place.
    chosen = []
    find, put = bisect.bisect_left, bisect.insort
    for size in (small << _BIN_BITS).tolist():
        j = find(keys, size)
        if j == len(keys):
            b = opened
            opened += 1
            keys.append(((seq_len << _BIN_BITS) - size) | b)
        else:
            key = keys.pop(j)
            b = key & mask
            if key - size > mask:  # room left
                put(keys, key - size, 0, j)
        chosen.append(b)
    where[order[big:]] = chosen
    return where, opened


def pack_window(items: Items, seq_len: int, pad_id: int) -> Packed:
    """All the items into sequences by best fit decreasing (`assign_sequences`), padded."""
    records = _Records(seq_len, pad_id, items.spans is not None)
    records.add_window(items)
    return records.packed()


def _pack_windows(records: _Records, items: Items, window: int, final: bool) -> Items:
    """Add `items` to `records` `window` at a time, in order; the leftover (none if `final`)."""
    if window < 1:
        raise ValueError(f"window {window} must be >= 1")
    n = len(items)
    stop = n if final else n - n % window
    for a in range(0, stop, window):
        records.add_window(items.take(a, min(a + window, stop)))
    return items.take(stop, n)


def pack_items(items: Items, seq_len: int, window: int, pad_id: int, *, final: bool = False) -> tuple[Packed, Items]:
    """Pack items `window` at a time, in order; the last window of fewer is the leftover unless `final`."""
    records = _Records(seq_len, pad_id, items.spans is not None)
    leftover = _pack_windows(records, items, window, final)
    return records.packed(), leftover


def pack_documents(stream: packing.Piece, sizes, seq_len: int, window: int, pad_id: int, *, subsets=None,
                   final: bool = False, dtype=np.int32) -> tuple[Packed, Items]:
    """A run of documents (in input order) -> its records, and the leftover items (none if `final`).

    dtype: the records' tokens' (pass the output's token dtype: the writer then copies them as they are).
    """
    records = _Records(seq_len, pad_id, stream.spans is not None, dtype)
    items = _split(records, stream, sizes, subsets)
    leftover = _pack_windows(records, items, window, final)
    return records.packed(), leftover
