"""A document store's stream of sequences, packed at read time, and the cursor that resumes it.

Pure NumPy over a store's document lengths (`lengths(doc_ids)`; pipeline/reader/engine/store.py); no
token is read here. Every rank computes the same stream.

**Document order.** Epoch e reads every document of the store once, in the order of a keyed
permutation of its ids from (seed, e) (`pipeline.core.shuffle.Permutation`, computed per position,
never stored), or in store order without shuffling. Epoch e + 1 follows epoch e: the stream is one
run of documents over all epochs, from the run's first epoch to its end (or forever).

**concat** (`ConcatStream`): the documents back to back, cut into sequences of seq_len labels, each
sequence's context the label before it (the separator before the run's first label): every token of
every document is a label exactly once per epoch, and a sequence may hold the end of one epoch and
the start of the next. Its cursor: the next label's place, ``{"label": run labels taken, "epoch",
"position": in the epoch's order, "offset": token in that document}``. seq_len may change between
two takes: the next sequences start at the cursor, whatever their length.

**best_fit** (`BestFitStream`): each epoch's documents in packing windows of `pack_window`
documents (positions [q * W, (q + 1) * W)), each packed by best fit
(`pipeline.core.read_packing.best_fit_layout`, the job's --packing best_fit on one window); the
stream is the windows' sequences in order. Its cursor: ``{"epoch", "window": q, "chain": [[seq_len,
sequences taken], ...]}``. When seq_len changes inside a window, the fragments of its sequences not
yet taken are packed again at the new length (their order kept, documents longer than it cut anew)
and the chain gets an entry: nothing taken is repeated, nothing left out. The chain resets with
the next window; it is empty before a window's first take.

A cursor read back from a state is checked against the store when a stream opens on it (its keys,
a position inside the epoch's order and an offset inside that document, an epoch of the run, a
packing window of the epoch, each chain entry taking fewer sequences than its packing holds):
`StoreStateError` naming the field (pipeline/reader/engine/doc_state.py).

**The end.** With `end_epoch`, the stream ends after epoch end_epoch - 1: every later sequence is
padding (no labels), so a finite run gives every label of its epochs once and nothing more.
"""

from __future__ import annotations

import numpy as np

from pipeline.core import read_packing
from pipeline.core.hashing import fold64
from pipeline.core.shuffle import Permutation
from pipeline.reader.engine.doc_state import StoreStateError, exact_keys, int_field
from pipeline.reader.engine.request import MAX_EPOCHS, MAX_SEQ_LEN, MAX_STEP_LABELS, MAX_STEPS, integer

_DOC_ORDER_TAG = 0x444F  # "DO": domain separation of the epochs' document permutations
_KEEP_EPOCHS = 4
_BLOCK = 1 << 16  # positions of an epoch's order whose documents and lengths are looked up together
MAX_LABELS = MAX_STEPS * MAX_STEP_LABELS  # labels a run can take (fits in int64)


class DocumentOrder:
    """Each epoch's order of a store's documents (see the module docstring)."""

    def __init__(self, num_documents: int, seed: int | None, shuffle: bool):
        if shuffle and seed is None:
            raise ValueError("shuffling needs a seed (pass seed=<int>, or shuffle=False)")
        if num_documents < 1:
            raise ValueError("the store holds no documents")
        self.n = int(num_documents)
        self.seed, self.shuffle = seed, bool(shuffle)
        self._perms: dict[int, Permutation] = {}

    def docs(self, epoch: int, positions) -> np.ndarray:
        """The documents at these positions of the epoch's order."""
        positions = np.asarray(positions, np.int64)
        if not self.shuffle:
            return positions.copy()
        perm = self._perms.get(epoch)
        if perm is None:
            if len(self._perms) >= _KEEP_EPOCHS:
                self._perms.clear()
            perm = self._perms[epoch] = Permutation(self.n, fold64(_DOC_ORDER_TAG, self.seed, epoch))
        return perm(positions)


class _Stream:
    def __init__(self, lengths, order: DocumentOrder, end_epoch: int | None, first_epoch: int):
        self._lengths = lengths
        self.order = order
        self.end_epoch = end_epoch
        self.first_epoch = int(first_epoch)
        self._block_at: tuple[int, int] | None = None
        self._block: tuple[np.ndarray, np.ndarray] = ()

    def _ended(self, epoch: int) -> bool:
        return self.end_epoch is not None and epoch >= self.end_epoch

    def _epoch_field(self, cursor) -> int:
        """The cursor's epoch: from the run's first to its end (the end itself: a finished run's cursor)."""
        last = self.end_epoch if self.end_epoch is not None else self.first_epoch + MAX_EPOCHS
        return int_field(cursor, "epoch", self.first_epoch, last, "cursor")

    def _documents(self, epoch: int, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The documents at positions [first, stop) of the epoch's order, and their lengths.

        Looked up a block of positions at a time, the last block kept: every rank walks every
        position, and one call per block costs less than one per window.
        """
        parts = []
        while first < stop:
            b = first // _BLOCK
            if self._block_at != (epoch, b):
                docs = self.order.docs(epoch, np.arange(b * _BLOCK, min((b + 1) * _BLOCK, self.order.n)))
                self._block, self._block_at = (docs, self._lengths(docs)), (epoch, b)
            end = min(stop, (b + 1) * _BLOCK)
            parts.append(tuple(x[first - b * _BLOCK : end - b * _BLOCK] for x in self._block))
            first = end
        if len(parts) == 1:
            return parts[0][0].copy(), parts[0][1].copy()
        z = [np.zeros(0, np.int64)]
        return np.concatenate([p[0] for p in parts] + z), np.concatenate([p[1] for p in parts] + z)


class ConcatStream(_Stream):
    """The concat stream of a store (module docstring).

    Args:
        lengths: document id(s) -> tokens.
        order: the epochs' document order.
        tokens: the store's tokens (an epoch's labels).
        end_epoch: the first epoch not read (None: forever).
        cursor: where to continue (None: the start of `first_epoch`), checked against the store
            (`StoreStateError` naming the field).
        first_epoch: the run's first epoch.
    """

    KEYS = ("label", "epoch", "position", "offset")

    def __init__(self, lengths, order: DocumentOrder, tokens: int, end_epoch: int | None = None,
                 cursor: dict | None = None, first_epoch: int = 0):
        super().__init__(lengths, order, end_epoch, first_epoch)
        self.tokens = int(tokens)
        self._mean = max(1.0, self.tokens / order.n)  # how many documents a take asks for at once
        if cursor is None:
            self.label, self.epoch, self.position, self.offset = 0, first_epoch, 0, 0
        else:
            self._resume(cursor)

    def _resume(self, cursor) -> None:
        exact_keys(cursor, self.KEYS, "cursor")
        self.label = int_field(cursor, "label", 0, MAX_LABELS, "cursor")
        self.epoch = self._epoch_field(cursor)
        if self.epoch != self.first_epoch + self.label // self.tokens:
            raise StoreStateError(f"state field cursor.epoch {self.epoch}: label {self.label} is in epoch "
                                  f"{self.first_epoch + self.label // self.tokens} of a run from epoch "
                                  f"{self.first_epoch} over {self.tokens} tokens an epoch")
        self.position, self.offset = self._place_fields(cursor)

    def _place_fields(self, cursor) -> tuple[int, int]:
        if self._ended(self.epoch):  # the end of a finite run
            return int_field(cursor, "position", 0, 0, "cursor"), int_field(cursor, "offset", 0, 0, "cursor")
        position = int_field(cursor, "position", 0, self.order.n - 1, "cursor")
        length = int(self._lengths(self.order.docs(self.epoch, [position]))[0])
        return position, int_field(cursor, "offset", 0, length - 1, "cursor")

    def check_taken(self, sequences: int, labels: int) -> None:
        """Refuse a cursor whose label count is not the `labels` the steps before it took."""
        if self.label != labels:
            raise StoreStateError(f"state field cursor.label {self.label}: the steps before the state's window "
                                  f"take {labels} labels")

    def cursor(self) -> dict:
        """Where the next take starts (a small JSON-able dict)."""
        return {"label": self.label, "epoch": self.epoch, "position": self.position, "offset": self.offset}

    def _walk(self, epoch: int, position: int, labels: int):
        """Documents from (epoch, position) on, holding more than `labels` tokens or up to the stream's end.

        Returns (docs, keys, lengths, epochs, positions): the documents, their positions as keys.
        """
        parts = []
        got = 0
        ask = int(labels / self._mean * 1.1) + 16
        n = self.order.n
        while got <= labels and not self._ended(epoch):
            take = min(ask, n - position)
            pos = np.arange(position, position + take, dtype=np.int64)
            docs, lengths = self._documents(epoch, position, position + take)
            parts.append((docs, pos, lengths, np.full(take, epoch, np.int64)))
            got += int(lengths.sum())
            position += take
            if position == n:
                epoch, position = epoch + 1, 0
            ask *= 2
        if not parts:
            z = np.zeros(0, np.int64)
            return z, z, z, z, z
        docs, pos, lengths, epochs = (np.concatenate([p[i] for p in parts]) for i in range(4))
        return docs, pos, lengths, epochs, pos

    def take(self, count: int, seq_len: int) -> read_packing.ConcatRun:
        """The next `count` sequences of `seq_len` labels (padding after the stream's end)."""
        a = self.label
        if self._ended(self.epoch):
            z = np.zeros(0, np.int64)
            return read_packing.ConcatRun(seq_len, count, a, a, z, z, z, z)
        need = count * seq_len
        docs, keys, lengths, epochs, positions = self._walk(self.epoch, self.position, self.offset + need)
        starts = a - self.offset + np.cumsum(lengths) - lengths
        if a > 0 and self.offset == 0:  # the context of the first sequence: the previous document's last token
            e, p = (self.epoch, self.position - 1) if self.position else (self.epoch - 1, self.order.n - 1)
            prev = self.order.docs(e, [p])
            prev_len = self._lengths(prev)
            docs, keys, lengths = (np.concatenate([x, y]) for x, y in ((prev, docs), ([p], keys),
                                                                      (prev_len, lengths)))
            starts = np.concatenate([[a - int(prev_len[0])], starts])
            epochs = np.concatenate([[e], epochs])
            positions = np.concatenate([[p], positions])
        stream_end = int(starts[-1] + lengths[-1]) if len(starts) else a
        ended = stream_end <= a + need  # the walk stopped at the stream's end
        layout = read_packing.ConcatRun(seq_len, count, a, stream_end if ended else None, docs, keys, starts,
                                        lengths)
        nxt = min(a + need, stream_end)
        if nxt >= stream_end and ended:
            self.label, self.epoch, self.position, self.offset = nxt, int(self.end_epoch), 0, 0
        else:
            j = int(np.searchsorted(starts, nxt, side="right")) - 1
            self.label, self.epoch, self.position, self.offset = nxt, int(epochs[j]), int(positions[j]), int(
                nxt - starts[j])
        return layout


class BestFitStream(_Stream):
    """The best_fit stream of a store (module docstring).

    Args:
        lengths: document id(s) -> tokens.
        order: the epochs' document order.
        pack_window: documents per packing window.
        end_epoch: the first epoch not read (None: forever).
        cursor: where to continue (None: the start of `first_epoch`).
        first_epoch: the run's first epoch.
    """

    KEYS = ("epoch", "window", "chain")

    def __init__(self, lengths, order: DocumentOrder, pack_window: int, end_epoch: int | None = None,
                 cursor: dict | None = None, first_epoch: int = 0):
        super().__init__(lengths, order, end_epoch, first_epoch)
        if pack_window < 1:
            raise ValueError(f"pack_window {pack_window} must be >= 1")
        self.pack_window = int(pack_window)
        self.epoch, self.window, self.chain = first_epoch, 0, []
        if cursor is not None:
            self._resume(cursor)
        self._current = None if not self.chain else self._replay()

    def _resume(self, cursor) -> None:
        exact_keys(cursor, self.KEYS, "cursor")
        self.epoch = self._epoch_field(cursor)
        windows = -(-self.order.n // self.pack_window)
        self.window = int_field(cursor, "window", 0, 0 if self._ended(self.epoch) else windows - 1, "cursor")
        chain = cursor["chain"]
        if not isinstance(chain, list) or (chain and self._ended(self.epoch)):
            raise StoreStateError(f"state field cursor.chain {chain!r}: a list of [seq_len, sequences taken] "
                                  "(empty at the end of a run)")
        self.chain = []
        for i, entry in enumerate(chain):
            if not isinstance(entry, list | tuple) or len(entry) != 2:
                raise StoreStateError(f"state field cursor.chain[{i}] {entry!r}: a pair [seq_len, sequences taken]")
            seq_len = integer(f"state field cursor.chain[{i}] seq_len", entry[0], 1, MAX_SEQ_LEN,
                              error=StoreStateError)
            if i and seq_len == self.chain[-1][0]:
                raise StoreStateError(f"state field cursor.chain[{i}]: seq_len {seq_len} again (an entry is a change)")
            taken = integer(f"state field cursor.chain[{i}] sequences taken", entry[1], 0, MAX_LABELS,
                            error=StoreStateError)
            self.chain.append([seq_len, taken])

    def check_taken(self, sequences: int, labels: int) -> None:
        """Nothing to compare: a best_fit window's sequence count depends on its documents (the seal covers it)."""

    def cursor(self) -> dict:
        """Where the next take starts (a small JSON-able dict)."""
        return {"epoch": self.epoch, "window": self.window, "chain": [list(x) for x in self.chain]}

    def _window_fragments(self):
        n = self.order.n
        first = self.window * self.pack_window
        pos = np.arange(first, min(first + self.pack_window, n), dtype=np.int64)
        docs, lengths = self._documents(self.epoch, first, first + len(pos))
        return docs, pos, np.zeros(len(pos), np.int64), lengths

    def _replay(self) -> read_packing.BestFitPack:
        # The current packing from the cursor: the window at its first seq_len, then each change's
        # leftover. Each entry took fewer sequences than its packing holds (taking the last moves on).
        pack = None
        for i, (seq_len, taken) in enumerate(self.chain):
            fragments = self._window_fragments() if pack is None else read_packing.leftover(
                pack.layout(), self.chain[i - 1][1])
            pack = read_packing.BestFitPack(*fragments, seq_len)
            if taken >= pack.count:
                raise StoreStateError(f"state field cursor.chain[{i}]: {taken} sequences taken of a packing of "
                                      f"{pack.count}")
        return pack

    def _next_window(self) -> None:
        self.window += 1
        if self.window * self.pack_window >= self.order.n:
            self.epoch, self.window = self.epoch + 1, 0
        self.chain, self._current = [], None

    def take(self, count: int, seq_len: int) -> read_packing.Stacked:
        """The next `count` sequences of `seq_len` labels (padding after the stream's end)."""
        parts = []
        while count and not self._ended(self.epoch):
            if not self.chain:
                self._current = read_packing.BestFitPack(*self._window_fragments(), seq_len)
                self.chain = [[seq_len, 0]]
            elif self.chain[-1][0] != seq_len:
                self._current = read_packing.BestFitPack(
                    *read_packing.leftover(self._current.layout(), self.chain[-1][1]), seq_len)
                self.chain.append([seq_len, 0])
            taken = self.chain[-1][1]
            m = min(count, self._current.count - taken)
            parts.append(_Slice(self._current, taken, m))
            self.chain[-1][1] += m
            count -= m
            if self.chain[-1][1] == self._current.count:
                self._next_window()
        if count:
            parts.append(read_packing.empty_layout(seq_len, count))
        return read_packing.Stacked(parts or [read_packing.empty_layout(seq_len, 0)])


class _Slice:
    """Sequences [first, first + count) of a packing, selected lazily (a rank takes its own only)."""

    def __init__(self, layout: read_packing.BestFitPack, first: int, count: int):
        self.layout, self.first, self.count, self.seq_len = layout, first, count, layout.seq_len

    def real(self) -> int:
        return self.count

    def select(self, sequences) -> read_packing.Layout:
        return self.layout.select(np.asarray(sequences, np.int64) + self.first)
