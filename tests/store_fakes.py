"""Stores as lengths alone, for the read-time packing tests: a document's tokens are a function of its id.

`FakeStore` stands where pipeline/reader/engine/store.py's `DocStore` does (`lengths`, `read_into`),
so every layout, stream and order check is exact and needs no file. The reader over stores the job
wrote: tests/test_docstore.py.
"""

from __future__ import annotations

import types

import numpy as np

from pipeline.core import read_packing as rp
from pipeline.reader.engine.doc_plan import StoreOrder, parse_schedule
from pipeline.reader.engine.doc_stream import BestFitStream, ConcatStream, DocumentOrder

EOS = 2


def doc_tokens(d: int, n: int) -> np.ndarray:
    """Document d's n tokens: a pattern of its id, EOS last (and nowhere else)."""
    t = (np.arange(n, dtype=np.int64) * 31 + d * 7919) % 50000 + 3
    t[-1] = EOS
    return t


class FakeStore:
    """Documents of the given lengths, their tokens `doc_tokens(d, length)`."""

    def __init__(self, lengths):
        self.len = np.asarray(lengths, np.int64)

    def lengths(self, docs):
        return self.len[np.asarray(docs, np.int64)]

    def read_into(self, buffer, offsets, docs, starts, lengths):
        for o, d, s, n in zip(offsets.tolist(), docs.tolist(), starts.tolist(), lengths.tolist(), strict=True):
            buffer[o : o + n] = doc_tokens(d, int(self.len[d]))[s : s + n]


def whole(layout) -> rp.Layout:
    """A stream's take (selected lazily by ranks) as one layout."""
    return layout if isinstance(layout, rp.Layout) else layout.select(np.arange(layout.count))


def filled(layout, store):
    """A layout's token arrays and loss mask, filled from a fake store."""
    layout = whole(layout)
    out = rp.fill(layout, store.read_into, separator=EOS, pad=0)
    out["loss_mask"] = rp.loss_mask(out["used"], layout.seq_len)
    return out


LENGTHS = np.random.default_rng(7).integers(1, 300, 400)  # 400 documents of 1-299 tokens


def make_order(store, schedule=(), state=None, packing_mode="concat", window=96, shuffle=True):
    """A store's order for global batch 24, seq_len 32, seed 5 (windows of 96 // 24 = 4 steps by default)."""
    segments = parse_schedule(24, 32, schedule)
    order = DocumentOrder(len(store.len), 5, shuffle)

    def open_stream(cursor):
        if packing_mode == "concat":
            return ConcatStream(store.lengths, order, int(store.len.sum()), None, cursor)
        return BestFitStream(store.lengths, order, 50, None, cursor)

    return StoreOrder(open_stream, {"store": "fake", "packing": packing_mode}, segments, seed=5, shuffle=shuffle,
                      window=window, token_bytes=2, state=state)


def rank_steps(order, dp_rank, dp_size, store, steps, start=0):
    """A rank's token arrays of `steps` steps from `start` on."""
    out = []
    for window in order.windows(start):
        first = max(window.first, start)
        seqs = window.rank_sequences(dp_rank, dp_size, first)
        out += [filled(window.layout.select(s), store)["tokens"] for s in seqs]
        if len(out) >= steps:
            return out[:steps]
    return out




class FakeDocStore(FakeStore):
    """A FakeStore with what the mixture of stores asks of a `DocStore` (counts, identity, token size)."""

    itemsize = 2

    def __init__(self, lengths):
        super().__init__(lengths)
        n, tokens = len(self.len), int(self.len.sum())
        self.source = types.SimpleNamespace(num_documents=n, num_tokens=tokens,
                                            identity=lambda: {"documents": n, "tokens": tokens, "shards": 1})

    @property
    def num_documents(self) -> int:
        """Documents in the store."""
        return len(self.len)
