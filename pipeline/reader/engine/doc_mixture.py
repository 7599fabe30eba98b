"""A mixture of document stores, packed when read: which source and which of its sequences fill global batch k.

The blend and the dealing are the packed-record mixtures' (pipeline/reader/engine/mixture.py,
`MixtureOrder`): global step k holds the mixture's samples [k*G, (k+1)*G); within a segment of the
mixture's schedule (its weights), after any n samples every source's count is within 1 of n x its
weight; steps form windows of S = max(1, window // G) steps, split in parts at schedule steps, and
in each part every source's next samples are dealt column by column, so rank r's columns hold one
contiguous run of each source's samples. Here a source's sample j is the j-th *sequence* of its
own stream (pipeline/reader/engine/doc_stream.py: the store's documents in its own per-(seed, source,
epoch) order, packed at the mixture's seq_len): the proportions are exact in sequences (in label
tokens too for concat, whose sequences are all seq_len labels; best_fit sequences hold padding).
Each source runs through its own epochs, the others unaffected.

State (`StoreMixtureOrder.state`): the mixture order's state (its step, each source's samples
taken, the window and segment starts, the weights schedule) and, per source, its stream's cursor at
the window's start. Resuming from it, on any number of ranks, re-takes at most one window.
The global batch and seq_len are fixed for a mixture's run (its schedule re-weights the sources).

`open_reader` and `store_state` take a store or a mixture of stores alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core import read_packing
from pipeline.core.hashing import fold64, stable_hash
from pipeline.format.mixture import Mixture, MixtureError, is_mixture, load_mixture
from pipeline.reader.engine.doc_reader import StoreReader, StoreSettings, arrays_of, chunks, reshaped, stream_opener
from pipeline.reader.engine.doc_state import StoreStateError, check_seal, field, int_field, seal
from pipeline.reader.engine.mixture import MixtureOrder
from pipeline.reader.engine.plan import default_window
from pipeline.reader.engine.request import MAX_STEPS, OPTIONAL_FEATURES, check_ranks, integer, select_features
from pipeline.reader.engine.store import DocStore, check_store, is_store, load_store

STORE_MIXTURE_ORDER = "docstore-mixture-1"
_SOURCE_TAG = 0x4D44  # "MD"
_KEEP_ANCHORS = 256  # window starts' cursors kept behind the latest (besides the first)


@dataclasses.dataclass
class MixtureWindow:
    """Steps [first, first + steps) of a mixture and every source's sequences they take.

    source, index: int64 [steps * G], per position of the window's batches (step-major): its
    source, and its sequence in that source's `layouts` entry.
    """

    first: int
    steps: int
    source: np.ndarray
    index: np.ndarray
    layouts: list[read_packing.Layout]


class StoreMixtureOrder:
    """The global order of a mixture of stores (module docstring).

    Args:
        mixture: the mixture (its sources' manifests are stores).
        stores: each source's opened store, in the mixture's order.
        settings: global batch, seq_len, packing, seed, shuffle, window, pack_window (`StoreSettings`).
        state: a state from `state()` to continue from.
    """

    def __init__(self, mixture: Mixture, stores: list[DocStore], settings: StoreSettings, state: dict | None = None):
        if settings.schedule:
            raise ValueError("a mixture of stores reads one seq_len and global batch size; its own schedule "
                             "re-weights the sources")
        self.mixture, self.stores, self.settings = mixture, stores, settings
        g, seq_len = settings.global_batch_size, settings.seq_len
        window = settings.shuffle_buffer or default_window(seq_len, stores[0].itemsize)
        if state is not None:
            self._check(state)
        self.blend = MixtureOrder(mixture.names, [[s.num_documents] for s in stores], mixture.schedule, g,
                                  seed=settings.seed, shuffle=settings.shuffle, window_steps=max(1, window // g),
                                  state=None if state is None else state["mixture"], state_error=StoreStateError)
        self._openers = []
        for name, store in zip(mixture.names, stores, strict=True):
            seed = fold64(_SOURCE_TAG, settings.seed, stable_hash(name)) if settings.shuffle else None
            source_settings = dataclasses.replace(settings, seed=seed, num_epochs=None, epoch=0)
            self._openers.append(stream_opener(store, source_settings))
        w = self.blend.start_step // self.blend.window_steps
        self._known = {w: self._cursors(state, w)} if state is not None else {0: [None] * len(stores)}
        self._origin = min(self._known)  # the first anchor (never pruned)
        if state is not None:
            check_seal(state)  # last: the fields' own checks name what is wrong
        self.start_step = self.blend.start_step

    def identity(self) -> dict:
        """What the order depends on (a state saved under another is refused)."""
        s = self.settings
        out = {"order": STORE_MIXTURE_ORDER, "stores": [st.source.identity() for st in self.stores],
               "packing": s.packing, "seq_len": s.seq_len}
        if s.packing == "best_fit":
            out["pack_window"] = s.pack_window
        return out

    def _check(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("order") != STORE_MIXTURE_ORDER:
            order = state.get("order") if isinstance(state, dict) else type(state).__name__
            raise MixtureError(f"the state's order {order!r} is not {STORE_MIXTURE_ORDER!r}")
        inner = field(state, "mixture")
        names = field(inner, "sources", "state field mixture")
        stored = field(state, "stores")
        if (not isinstance(names, list) or not isinstance(stored, list) or len(stored) != len(names)
                or not all(isinstance(n, str) for n in names)):
            raise StoreStateError(f"state fields stores and mixture.sources: a store per source ({names!r})")
        stores = dict(zip(names, stored, strict=True))
        for key, value in self.identity().items():
            if key == "stores":
                for name, identity in zip(self.mixture.names, value, strict=True):
                    if name in stores and stores[name] != identity:
                        raise MixtureError(f"source {name!r} is another store than when the state was saved")
            elif field(state, key) != value:
                raise MixtureError(f"the state was saved with {key}={state.get(key)!r}, this reader has {value!r}")
        cursors = field(state, "cursors")
        if not isinstance(cursors, list) or len(cursors) != len(names):
            raise StoreStateError(f"state field cursors: a cursor per source of the state ({len(names)}), got "
                                  f"{cursors!r:.200}")
        if int_field(state, "step", 0, MAX_STEPS) != field(inner, "step", "state field mixture"):
            raise StoreStateError(f"state field step {state['step']} is not the mixture's step {inner['step']!r}")

    def _cursors(self, state: dict, w: int) -> list:
        """Each source's cursor at window w's start, checked against its store (a source new to the run: None)."""
        by_name = dict(zip(state["mixture"]["sources"], state["cursors"], strict=True))
        taken = self.blend.counts_at(w)
        out = []
        for d, name in enumerate(self.mixture.names):
            cursor = by_name.get(name)
            if cursor is None and taken[d]:
                raise StoreStateError(f"state field cursors: no cursor of source {name!r}, which the run read")
            if cursor is not None:
                n = int(taken[d])
                self._openers[d](cursor).check_taken(n, n * self.settings.seq_len)
            out.append(cursor)
        return out

    def state(self, step: int) -> dict:
        """The state after `step` global steps: a small JSON-able dict to save beside a checkpoint."""
        w = step // self.blend.window_steps
        cursors = self._cursors_at(w)
        inner = self.blend.state(step)
        inner.pop("epochs", None)  # its "records" are each store's documents; a stream's cursor holds its epoch
        return seal({**self.identity(), "mixture": inner, "cursors": cursors, "step": int(step)})

    def _cursors_at(self, w: int):
        if w not in self._known:
            for window in self.windows(self._nearest(w) * self.blend.window_steps, stop_window=w):
                del window
        return self._known[w]

    def _nearest(self, w: int) -> int:
        known = [k for k in list(self._known) if k <= w]  # list(): a copy taken at once (GIL)
        if not known:
            raise ValueError(f"window {w} is before the resume point (step {self.start_step})")
        return max(known)

    def windows(self, from_step: int | None = None, stop_window: int | None = None):
        """The windows from the one holding `from_step` on (`stop_window`: a window to end before)."""
        from_step = self.start_step if from_step is None else int(from_step)
        per = self.blend.window_steps
        first_w = from_step // per
        while True:  # two iterators may share this reader: an anchor another pruned is looked up again
            w = self._nearest(first_w)
            cursors = self._known.get(w)
            if cursors is not None:
                break
        streams = [open_stream(cursor) for open_stream, cursor in zip(self._openers, cursors, strict=True)]
        g, seq_len = self.settings.global_batch_size, self.settings.seq_len
        while stop_window is None or w < stop_window:
            src, samples = self.blend.window_samples(w)
            src, samples = src.reshape(-1), samples.reshape(-1)
            index = np.empty_like(samples)
            parts: list[list[read_packing.Layout]] = [[] for _ in self.stores]
            taken = np.zeros(len(self.stores), np.int64)
            for r0, r1 in self.blend.parts(w):
                sl = slice(r0 * g, r1 * g)
                for d in np.unique(src[sl]).tolist():
                    sel = np.flatnonzero(src[sl] == d) + r0 * g
                    first = int(samples[sel].min())
                    n = int(sel.size)
                    if int(samples[sel].max()) - first + 1 != n:
                        raise RuntimeError(f"mixture of stores: source {d}'s samples of a part are not one run")
                    parts[d].append(streams[d].take(n, seq_len))
                    index[sel] = taken[d] + samples[sel] - first
                    taken[d] += n
            layouts = [read_packing.Stacked(p or [read_packing.empty_layout(seq_len)]) for p in parts]
            self._remember(w + 1, [s.cursor() for s in streams])
            if w >= first_w:
                yield MixtureWindow(w * per, per, src, index, layouts)
            w += 1

    def _remember(self, w: int, cursors) -> None:
        self._known[w] = cursors
        if len(self._known) > 2 * _KEEP_ANCHORS:
            # The start (window 0, or the resume point's) stays: a new iterator from it walks from there.
            for k in sorted(self._known)[:-_KEEP_ANCHORS]:
                if k != self._origin:
                    self._known.pop(k, None)


class MixtureStoreReader:
    """One rank's batches of a mixture of stores (the `StoreReader` interface: plans, fill, state, resume).

    Args:
        mixture: the mixture, its sources stores.
        settings: the reader's settings (no seq_len/batch schedule: the mixture's own re-weights).
        dp_rank: this rank.
        dp_size: number of ranks.
        check: check every store before step 0.
    """

    def __init__(self, mixture: Mixture, settings: StoreSettings, dp_rank: int = 0, dp_size: int = 1,
                 check: bool = True):
        sources = [load_store(s.manifest) for s in mixture.sources]
        if check:
            for source in sources:
                check_store(source, settings.verify)
        if len({s.dtype.name for s in sources}) > 1 or len({s.separator_id for s in sources}) > 1:
            raise MixtureError(f"mixture {mixture.description}: its stores differ in token dtype or separator")
        g = settings.global_batch_size
        dp_rank, dp_size = check_ranks(dp_rank, dp_size)
        if g % dp_size:
            raise ValueError(f"global batch {g} is not split by dp_size {dp_size} (dp_rank {dp_rank})")
        self.mixture, self.settings = mixture, settings
        self.stores = [DocStore(s) for s in sources]
        self.token_dtype = sources[0].dtype
        self.features = select_features(settings.features, OPTIONAL_FEATURES, "a document store")
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.order = StoreMixtureOrder(mixture, self.stores, settings, settings.state)
        self._begin(settings.state, settings.start_step)

    def _begin(self, state, start_step: int) -> None:
        self.start = self.order.start_step if state is not None else start_step
        self.stop = None if self.settings.num_steps is None else self.start + self.settings.num_steps

    def resume(self, state: dict) -> None:
        """Continue from a state (`state(step)`); the run still ends where it would have."""
        stop = self.stop
        self.settings = dataclasses.replace(self.settings, state=state, start_step=0)
        self.order = StoreMixtureOrder(self.mixture, self.stores, self.settings, state)
        self._begin(state, 0)
        self.stop = stop

    def plans(self):
        """(window, first step, the rank's positions int64 [k, B] in the window) from the start on."""
        b = self.settings.global_batch_size // self.dp_size
        g = self.settings.global_batch_size
        for window in self.order.windows(self.start):
            first = max(window.first, self.start)
            last = window.first + window.steps if self.stop is None else min(window.first + window.steps, self.stop)
            if last <= first:
                return
            steps = np.arange(first - window.first, last - window.first, dtype=np.int64)[:, None]
            positions = steps * g + self.dp_rank * b + np.arange(b, dtype=np.int64)[None, :]
            yield from chunks(window, first, positions, self.settings.seq_len)
            if self.stop is not None and last >= self.stop:
                return

    def fill_raw(self, window: MixtureWindow, positions: np.ndarray) -> dict:
        """These positions of a window filled, each from its source's store: shaped positions.shape + (...)."""
        flat = positions.reshape(-1)
        src, idx = window.source[flat], window.index[flat]
        out = None
        for d in np.unique(src).tolist():
            sel = np.flatnonzero(src == d)
            store = self.stores[d]
            raw = read_packing.fill(window.layouts[d].select(idx[sel]), store.read_into,
                                    separator=store.source.separator_id, pad=store.source.pad_id,
                                    dtype=store.source.dtype, features=bool(self.features))
            if out is None:
                out = {k: np.empty((len(flat), *v.shape[1:]), v.dtype) for k, v in raw.items()}
            for k, v in raw.items():
                out[k][sel] = v
        return reshaped(out, positions.shape)

    def fill(self, window: MixtureWindow, positions: np.ndarray) -> dict:
        """The batches of these positions of a window (`arrays_of`): arrays of shape positions.shape + (L,)."""
        return arrays_of(self.fill_raw(window, positions), self.features)

    def __iter__(self):
        """Every batch of the rank, in order (dicts of NumPy arrays)."""
        for window, _, positions in self.plans():
            arrays = self.fill(window, positions)
            for s in range(len(positions)):
                yield {k: v[s] for k, v in arrays.items()}

    def state(self, step: int) -> dict:
        """The order's state after `step` global steps."""
        return self.order.state(step)


def is_store_mixture(mixture: Mixture) -> bool:
    """Whether a mixture's sources are document stores (the mixture check makes them all of one kind)."""
    return is_store(mixture.sources[0].manifest)


def open_reader(location, settings: StoreSettings, dp_rank: int = 0, dp_size: int = 1, check: bool = True):
    """The rank's reader of a store (`StoreReader`) or of a mixture of stores (a `Mixture`: `MixtureStoreReader`)."""
    if isinstance(location, Mixture):
        return MixtureStoreReader(location, settings, dp_rank, dp_size, check)
    return StoreReader(location, settings, dp_rank, dp_size, check)


def store_state(store, global_batch_size: int, seq_len: int, step: int, *, state: dict | None = None,
                **settings) -> dict:
    """The order's state after `step` global steps of a store or a mixture of stores, without reading tokens.

    Pass the run's settings (seed, packing, schedule, ...: `StoreSettings`'s fields); `state`: one
    saved at an earlier step, to walk from there rather than from step 0 (document lengths only).
    Save the result beside the checkpoint of step k; resume with `state=` on any number of ranks.
    """
    location = load_mixture(store) if is_mixture(store) else store
    schedule = settings.pop("schedule", None)
    reader = open_reader(location, StoreSettings(global_batch_size=global_batch_size, seq_len=seq_len,
                                                 state=state, schedule=schedule, **settings), check=False)
    step = integer("step", step, 0, MAX_STEPS)
    if step < reader.start:
        raise ValueError(f"step {step} is before the given state's step {reader.start}")
    return reader.state(step)


def step_layouts(reader, step: int) -> list[tuple[int, int, read_packing.Layout]]:
    """The sequences of global step `step` of a reader's order: (position, source, its one-sequence layout).

    The source is 0 for a single store. The answer holds for any number of ranks.
    """
    if isinstance(reader, MixtureStoreReader):
        for window in reader.order.windows(step):
            g = reader.settings.global_batch_size
            at = (step - window.first) * g + np.arange(g)
            src, idx = window.source[at], window.index[at]
            return [(p, int(d), window.layouts[d].select([i])) for p, (d, i) in enumerate(
                zip(src.tolist(), idx.tolist(), strict=True))]
        raise ValueError(f"step {step} is past the end of the run")
    window, sequences = reader.order.batch(step)
    return [(p, 0, window.layout.select([i])) for p, i in enumerate(sequences.tolist())]
