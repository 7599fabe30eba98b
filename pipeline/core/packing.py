"""Pack token streams into fixed-length records with one token of overlap; nothing is lost.

A stream is a `Piece`: a context token followed by label tokens. Records hold `seq_len + 1`
tokens; inputs are `record[:-1]`, labels `record[1:]`, and record k+1 starts with the last token
of record k, so every label token is a label exactly once. Worked example, seq_len = 4, EOS = 9,
documents [1 2 3] and [4 5]:

    stream    9 | 1 2 3 9 4 5 9        (context 9, then each document + EOS)
    record 0  9 1 2 3 9                labels 1 2 3 9
    remainder context 9, labels 4 5 9  (carried on, packed with other remainders)

The remainder of a chunk is not padded or dropped: it is concatenated with other remainders
(`concat_pieces`) and packed again, so only one partial record exists per job, and the job's
policy (pad or drop) applies to it alone. A remainder may start inside a document; it then starts
a new segment (its own segment id, positions from 0) and follows the previous piece's EOS, exactly
as a document continued across a record boundary does.

Segment ids / positions follow seqio: per record, 1, 2, ... for each document (or fragment) of the
label positions, 0 for padding; positions count from 0 within each segment.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core import provenance


@dataclasses.dataclass
class Piece:
    """A token stream awaiting packing.

    context: the token before labels[0] (the input that predicts it).
    labels:  int32 tokens, each to become a label exactly once.
    starts:  bool per label, True where a segment (document or fragment) starts.
    spans:   where the labels come from (pipeline/core/provenance.py), or None when not recorded;
             packing carries them along with the labels.
    """

    context: int
    labels: np.ndarray
    starts: np.ndarray
    spans: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)


def build_stream(docs: list[np.ndarray], separator_id: int) -> Piece:
    """Concatenate documents (each already carrying its BOS/EOS) into one stream."""
    if not docs:
        return Piece(separator_id, np.zeros(0, np.int32), np.zeros(0, bool))
    labels = np.concatenate(docs).astype(np.int32, copy=False)
    starts = np.zeros(len(labels), bool)
    offsets = np.cumsum([0] + [len(d) for d in docs[:-1]])
    starts[offsets[[len(d) > 0 for d in docs]]] = True
    return Piece(separator_id, labels, starts)


def build_stream_flat(
    ids: np.ndarray,
    offsets: np.ndarray,
    chosen: np.ndarray,
    *,
    bos_id: int | None,
    eos_id: int | None,
    separator_id: int,
) -> Piece:
    """`build_stream` from one flat array of ids, without a Python object per token.

    Document i is ids[offsets[i]:offsets[i + 1]]; the chosen ones get BOS/EOS (None: not added).

    >>> build_stream_flat(np.array([5, 6, 7]), np.array([0, 2, 2, 3]), np.array([True, True, False]),
    ...                   bos_id=None, eos_id=9, separator_id=9).labels
    array([5, 6, 9, 9], dtype=int32)
    """
    chosen = np.asarray(chosen, bool)
    length = np.diff(np.asarray(offsets, np.int64))
    ids = np.asarray(ids)[int(offsets[0]):int(offsets[-1])] if len(offsets) else np.zeros(0, np.int32)
    if not chosen.all():
        ids, length = ids[np.repeat(chosen, length)], length[chosen]
    ends = np.cumsum(length)
    # BOS before and EOS after each document, inserted in one pass; at equal positions np.insert
    # keeps the order given, so an empty document still gets BOS then EOS, and a document's EOS
    # comes before the next one's BOS.
    marks = [(ends - length, bos_id), (ends, eos_id)]
    marks = [(where, token) for where, token in marks if token is not None]
    where = np.stack([w for w, _ in marks], axis=1).ravel() if marks else np.zeros(0, np.int64)
    values = np.tile(np.array([t for _, t in marks], np.int32), len(length))
    labels = np.insert(ids.astype(np.int32, copy=False), where, values)
    extra = len(marks)
    starts = np.zeros(len(labels), bool)
    starts[(ends - length + extra * np.arange(len(length)))[length + extra > 0]] = True
    return Piece(separator_id, labels, starts)


def concat_pieces(pieces: list[Piece], separator_id: int) -> Piece:
    """Join remainders into one stream; each piece's first label starts a new segment."""
    pieces = [p for p in pieces if len(p)]
    if not pieces:
        return Piece(separator_id, np.zeros(0, np.int32), np.zeros(0, bool))
    starts = np.concatenate([p.starts for p in pieces])
    firsts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    starts[firsts] = True
    spans = None
    if all(p.spans is not None for p in pieces):
        spans = provenance.concat_spans([p.spans for p in pieces])
    return Piece(pieces[0].context, np.concatenate([p.labels for p in pieces]), starts, spans)


def pack(piece: Piece, seq_len: int) -> tuple[np.ndarray, np.ndarray, Piece]:
    """Cut every full record from a stream.

    Returns (tokens [k, seq_len + 1], starts [k, seq_len], remainder) where the remainder holds the
    fewer than `seq_len` labels left over, with its context token.
    """
    n = len(piece)
    k = n // seq_len
    tokens = np.concatenate([np.array([piece.context], np.int32), piece.labels])
    # Rows overlap by one token: a strided view, copied once by whoever serializes it.
    records = (np.lib.stride_tricks.sliding_window_view(tokens, seq_len + 1)[: k * seq_len : seq_len] if k
               else np.zeros((0, seq_len + 1), np.int32))
    starts = piece.starts[: k * seq_len].reshape(k, seq_len).copy()
    if k:
        starts[:, 0] = True
    cut = k * seq_len
    rest_starts = piece.starts[cut:].copy()
    if len(rest_starts):
        rest_starts[0] = True
    rest_spans = None if piece.spans is None else provenance.split_spans(piece.spans, cut)[1]
    # A copy, not a view: a view would keep the whole stream alive as long as the remainder waits
    # (on a runner that holds a task's outputs in memory, every chunk's stream until the task ends).
    remainder = Piece(int(tokens[cut]), piece.labels[cut:].copy(), rest_starts, rest_spans)
    return records, starts, remainder


def pad_record(piece: Piece, seq_len: int, pad_id: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Pad a remainder (< seq_len labels) into one record; returns (tokens, starts, valid_labels)."""
    valid = len(piece)
    if not 0 < valid < seq_len:
        raise ValueError(f"a remainder holds 1..{seq_len - 1} labels, got {valid}")
    tokens = np.full(seq_len + 1, pad_id, np.int32)
    tokens[0] = piece.context
    tokens[1 : valid + 1] = piece.labels
    starts = np.zeros(seq_len, bool)
    starts[:valid] = piece.starts
    starts[0] = True
    return tokens, starts, valid


def segment_dtype(seq_len: int) -> np.dtype:
    """The narrowest dtype of segment ids (at most seq_len) and positions (below seq_len)."""
    return np.dtype(np.uint16) if seq_len <= np.iinfo(np.uint16).max else np.dtype(np.int32)


def segment_features(starts: np.ndarray, valid_labels: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Segment ids and positions for records' label positions from their segment-start flags.

    Both in `segment_dtype(seq_len)`: a quarter of int64's bytes to compute and to copy.

    >>> [a.tolist() for a in segment_features(np.array([[True, False, True, False]]))]
    [[[1, 1, 2, 2]], [[0, 1, 0, 1]]]
    """
    starts = np.atleast_2d(starts).copy()
    starts[:, 0] = True
    dtype = segment_dtype(starts.shape[1])
    segment_ids = np.cumsum(starts, axis=1, dtype=dtype)
    index = np.arange(starts.shape[1], dtype=dtype)
    positions = np.maximum.accumulate(np.where(starts, index, dtype.type(0)), axis=1)
    np.subtract(index, positions, out=positions)
    if valid_labels is not None:
        segment_ids[:, valid_labels:] = 0
        positions[:, valid_labels:] = 0
    return segment_ids, positions


def ranges(starts, lengths) -> np.ndarray:
    """starts[i], starts[i] + 1, ..., starts[i] + lengths[i] - 1 for every i, back to back (int64)."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(np.asarray(starts, np.int64) - firsts, lengths) + np.arange(total, dtype=np.int64)
