"""One rank's batches of a document store, packed at read time, as NumPy arrays: the engine of both readers.

`StoreReader` checks and opens the store (pipeline/reader/engine/store.py), builds its order
(pipeline/reader/engine/doc_plan.py over the stream of pipeline/reader/engine/doc_stream.py) and, window after
window, fills the rank's sequences from the store (`pipeline.core.read_packing.fill`). The tf.data
reader (pipeline/reader/doc_dataset.py) and the PyTorch one (pipeline/pytorch.py) both iterate it,
so they give the same batches by construction. No TensorFlow and no torch here.

A batch: {"inputs", "labels": int32 [B, L]; "loss_mask": float32 [B, L] (0 on padding);
"segment_ids", "positions": int32 [B, L] (with `features`)}, B = the rank's share of the step's
global batch, L = the step's seq_len (both may change with the schedule).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from pipeline.core import read_packing
from pipeline.reader.engine.doc_plan import StoreOrder, Window, parse_schedule, schedule_entries
from pipeline.reader.engine.doc_stream import BestFitStream, ConcatStream, DocumentOrder
from pipeline.reader.engine.request import (
    MAX_EPOCHS,
    MAX_PACK_WINDOW,
    MAX_STEPS,
    MAX_WINDOW_LABELS,
    OPTIONAL_FEATURES,
    SEED_LIMIT,
    boolean,
    check_ranks,
    feature_names,
    integer,
    select_features,
)
from pipeline.reader.engine.store import DocStore, check_store, load_store

log = logging.getLogger(__name__)

PACKINGS = ("concat", "best_fit")
DEFAULT_PACK_WINDOW = 1024  # documents per best-fit packing window (the job's --packing_window is in items)
CHUNK_LABELS = 1 << 18  # labels of a rank filled at once (~1 MiB of tokens): what the first batch waits for


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    """What a store reader is asked for besides the ranks (see `open_store_reader`)."""

    global_batch_size: int
    seq_len: int
    packing: str = "concat"
    seed: int | None = None
    shuffle: bool = True
    epoch: int = 0
    start_step: int = 0
    num_epochs: int | None = None
    num_steps: int | None = None
    shuffle_buffer: int | None = None
    pack_window: int = DEFAULT_PACK_WINDOW
    schedule: tuple = ()
    state: dict | None = None
    verify: bool = False
    features: tuple[str, ...] | None = None

    def __post_init__(self):
        # Every field checked here, once, for both readers (tf.data and PyTorch): a ValueError naming it.
        if self.packing not in PACKINGS:
            raise ValueError(f"packing {self.packing!r}: choose from {', '.join(PACKINGS)}")
        for name in ("shuffle", "verify"):
            boolean(name, getattr(self, name))
        integer("seed", self.seed, 0, SEED_LIMIT - 1, optional=True)
        if self.shuffle and self.seed is None:
            raise ValueError("shuffle=True needs a seed (the order must be the same on every rank and on "
                             "resumption); pass seed=<int>, or shuffle=False to read in store order.")
        integer("epoch", self.epoch, 0, MAX_EPOCHS)
        integer("start_step", self.start_step, 0, MAX_STEPS)
        integer("num_epochs", self.num_epochs, 1, MAX_EPOCHS, optional=True)
        integer("num_steps", self.num_steps, 1, MAX_STEPS, optional=True)
        integer("shuffle_buffer", self.shuffle_buffer, 1, MAX_WINDOW_LABELS, optional=True)
        integer("pack_window", self.pack_window, 1, MAX_PACK_WINDOW)
        object.__setattr__(self, "schedule", schedule_entries(self.schedule))
        segments = parse_schedule(self.global_batch_size, self.seq_len, self.schedule)
        longest = max(s.seq_len for s in segments)
        if self.shuffle_buffer is not None and self.shuffle_buffer * longest > MAX_WINDOW_LABELS:
            raise ValueError(f"shuffle_buffer {self.shuffle_buffer} x seq_len {longest}: a window of more than "
                             f"{MAX_WINDOW_LABELS} labels")
        if self.state is not None and not isinstance(self.state, dict):
            raise ValueError(f"state {type(self.state).__name__}: a dict from store_state() or state_dict()")
        if self.state is not None and self.start_step:
            raise ValueError("pass state (it holds the step) or start_step, not both")
        object.__setattr__(self, "features", feature_names(self.features))


def stream_opener(store: DocStore, settings: StoreSettings):
    """``open_stream(cursor)`` for the store's order under these settings (doc_stream.py)."""
    source = store.source
    order = DocumentOrder(source.num_documents, settings.seed, settings.shuffle)
    end = None if settings.num_epochs is None else settings.epoch + settings.num_epochs

    def open_stream(cursor):
        if settings.packing == "concat":
            return ConcatStream(store.lengths, order, source.num_tokens, end, cursor, settings.epoch)
        return BestFitStream(store.lengths, order, settings.pack_window, end, cursor, settings.epoch)

    return open_stream


def store_identity(store: DocStore, settings: StoreSettings) -> dict:
    """What the order depends on besides the seed, window and schedule (the run's first epoch included)."""
    out = {"store": store.source.identity(), "packing": settings.packing, "epoch": settings.epoch}
    if settings.packing == "best_fit":
        out["pack_window"] = settings.pack_window
    return out


def open_order(store: DocStore, settings: StoreSettings) -> StoreOrder:
    """The store's global order under these settings."""
    segments = parse_schedule(settings.global_batch_size, settings.seq_len, settings.schedule)
    return StoreOrder(stream_opener(store, settings), store_identity(store, settings), segments,
                      seed=settings.seed, shuffle=settings.shuffle, window=settings.shuffle_buffer,
                      token_bytes=store.itemsize, state=settings.state)


def chunks(window, first: int, rows: np.ndarray, seq_len: int):
    """(window, first step, rows) in pieces of about CHUNK_LABELS labels (whole steps)."""
    per = max(1, CHUNK_LABELS // max(1, rows.shape[1] * seq_len))
    for i in range(0, len(rows), per):
        yield window, first + i, rows[i : i + per]


def arrays_of(raw: dict, features: tuple[str, ...]) -> dict:
    """Filled sequences (`fill_raw`'s) as a reader's batch: int32 inputs/labels and features, float32 loss mask."""
    tokens = raw["tokens"]
    out = {"inputs": tokens[..., :-1].astype(np.int32), "labels": tokens[..., 1:].astype(np.int32),
           "loss_mask": read_packing.loss_mask(raw["used"], tokens.shape[-1] - 1)}
    for name in features:
        out[name] = raw[name].astype(np.int32)
    return out


def reshaped(raw: dict, shape: tuple[int, ...]) -> dict:
    """Filled arrays of n sequences as `shape` (n = its product) of them."""
    return {k: v.reshape(*shape, *v.shape[1:]) for k, v in raw.items()}


class StoreReader:
    """One rank's batches of a document store (module docstring).

    Args:
        location: the store: a Megatron output directory or its manifest.json.
        settings: the order and what to read (`StoreSettings`).
        dp_rank: this rank.
        dp_size: number of ranks (must divide every global batch size of the schedule).
    """

    def __init__(self, location, settings: StoreSettings, dp_rank: int = 0, dp_size: int = 1, check: bool = True):
        source = load_store(location)
        if check:  # before step 0 (a copy in a DataLoader worker, checked by its parent, skips it)
            check_store(source, settings.verify)
        self.store = DocStore(source)
        self.token_dtype = source.dtype
        self.settings = settings
        self.features = select_features(settings.features, OPTIONAL_FEATURES, "a document store")
        dp_rank, dp_size = check_ranks(dp_rank, dp_size)
        self.order = open_order(self.store, settings)
        for seg in self.order.segments:
            if seg.global_batch % dp_size:
                raise ValueError(f"global batch {seg.global_batch} (from step {seg.step}) is not split by "
                                 f"dp_size {dp_size} (dp_rank {dp_rank})")
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self._begin(settings.state, settings.start_step)
        log.info("store reader %s rank %d/%d: %d documents, %s packing, from step %d", source.manifest_file,
                 dp_rank, dp_size, source.num_documents, settings.packing, self.start)

    def _begin(self, state: dict | None, start_step: int) -> None:
        self.start = self.order.start_step if state is not None else start_step
        self.stop = None if self.settings.num_steps is None else self.start + self.settings.num_steps

    def resume(self, state: dict) -> None:
        """Continue from a state (`state(step)`, saved on any number of ranks): its step comes next.

        The run still ends where it would have (`num_steps` counts from the first start).
        """
        stop = self.stop
        self.settings = dataclasses.replace(self.settings, state=state, start_step=0)
        self.order = open_order(self.store, self.settings)
        self._begin(state, 0)
        self.stop = stop

    def plans(self):
        """(window, first step, the rank's sequences int64 [k, B] of steps first..), a few steps at a time.

        A window's steps come in chunks of about CHUNK_LABELS labels of the rank: what one fill
        makes (the first batch waits for one chunk, not for the whole window).
        """
        for window in self.order.windows(self.start):
            first = max(window.first, self.start)
            last = window.first + window.steps if self.stop is None else min(window.first + window.steps, self.stop)
            if last <= first:
                return
            seqs = window.rank_sequences(self.dp_rank, self.dp_size, first)[: last - first]
            yield from chunks(window, first, seqs, window.segment.seq_len)
            if self.stop is not None and last >= self.stop:
                return

    def fill_raw(self, window: Window, seqs: np.ndarray) -> dict:
        """These sequences of a window filled: `read_packing.fill`'s arrays, shaped seqs.shape + (...).

        The tokens stay in the store's dtype (the readers widen them where they copy them anyway).
        """
        layout = window.layout.select(seqs.reshape(-1))
        source = self.store.source
        raw = read_packing.fill(layout, self.store.read_into, separator=source.separator_id, pad=source.pad_id,
                                dtype=source.dtype, features=bool(self.features))
        return reshaped(raw, seqs.shape)

    def fill(self, window: Window, seqs: np.ndarray) -> dict:
        """The batches of these sequences of a window (`arrays_of`): arrays of shape seqs.shape + (L,)."""
        return arrays_of(self.fill_raw(window, seqs), self.features)

    def __iter__(self):
        """Every batch of the rank, in order (dicts of NumPy arrays)."""
        for window, _, seqs in self.plans():
            arrays = self.fill(window, seqs)
            for s in range(len(seqs)):
                yield {k: v[s] for k, v in arrays.items()}

    def state(self, step: int) -> dict:
        """The order's state after `step` global steps (save it beside the checkpoint of step k)."""
        return self.order.state(step)
