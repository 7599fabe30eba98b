"""The PyTorch reader's entry point: a document store packed at read time, as a `torch.utils.data` dataset.

Importable with only torch, NumPy and fsspec (no TensorFlow, no Beam)::

    from torch.utils.data import DataLoader            # or torchdata's StatefulDataLoader
    from pipeline.pytorch import StoreDataset

    ds = StoreDataset("/efs/pile-megatron", global_batch_size=256, seq_len=2048, dp_rank=rank, dp_size=world,
                      seed=1234, packing="concat")                 # checks the store before step 0
    loader = DataLoader(ds, batch_size=None, num_workers=2)       # each element is this rank's batch
    for batch in loader:   # {"inputs", "labels": int64 [256 / world, 2048], "loss_mask": float32, ...}
        ...
    saved = ds.state_dict()                 # a small dict, saved beside the checkpoint (num_workers=0), or
    saved = loader.state_dict()             # with StatefulDataLoader: every worker's position

Global step k holds the same sequences as `tfdata.make_dataset(store, ...)` gives with the same
arguments, for any number of ranks: both iterate `pipeline.reader.engine.doc_reader.StoreReader`.

**State.** `state_dict()` is the order's state at the next step this dataset (or this DataLoader
worker) yields: the step, the stream's cursor and the schedule (pipeline/reader/engine/doc_plan.py).
`load_state_dict(state)` continues from it, also a state saved on another number of ranks, and
`StoreDataset(..., state=saved)` starts there. This is the protocol torchdata's
`StatefulDataLoader` uses: it saves each worker's `state_dict()` with the loader's and calls
`load_state_dict` in each worker before iterating again.

**Threads.** Without DataLoader workers, `read_ahead` threads fill the next chunks of steps while
the current ones are consumed (the reads and copies release the GIL); the order is unchanged.

**Workers.** With a DataLoader of K workers, worker w yields the rank's steps start + w, start + w +
K, ...: the DataLoader takes one element from each worker in turn, so the rank sees its steps in
order, and each worker reads only its batches. Every worker follows the whole order (document
lengths only: a few bytes per document).
"""

from __future__ import annotations

import collections
import concurrent.futures

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from pipeline.core.read_packing import loss_mask
from pipeline.format.mixture import Mixture, is_mixture, load_mixture
from pipeline.reader.engine.doc_mixture import open_reader, store_state
from pipeline.reader.engine.doc_reader import DEFAULT_PACK_WINDOW, StoreSettings
from pipeline.reader.engine.doc_state import StoreStateError, exact_keys
from pipeline.reader.engine.errors import ShardIntegrityError
from pipeline.reader.engine.request import MAX_PARALLEL_READS, MAX_STEPS, check_ranks, integer

__all__ = ["Mixture", "ShardIntegrityError", "StoreDataset", "StoreStateError", "store_state"]


def _tensors(raw: dict, features: tuple[str, ...]) -> dict:
    """One batch of filled sequences (the reader's `fill_raw`) as tensors.

    Token ids int64 (what torch's embedding and cross-entropy take: widened in the one copy that
    cuts inputs and labels), the loss mask float32, segment ids and positions int64.
    """
    tokens = raw["tokens"]
    out = {"inputs": torch.from_numpy(tokens[:, :-1].astype(np.int64)),
           "labels": torch.from_numpy(tokens[:, 1:].astype(np.int64)),
           "loss_mask": torch.from_numpy(loss_mask(raw["used"], tokens.shape[-1] - 1))}
    for name in features:
        out[name] = torch.from_numpy(raw[name].astype(np.int64))
    return out


class StoreDataset(IterableDataset):
    """One rank's batches of a document store, packed when read (module docstring).

    Args:
        store: the store: an output directory of `--output_format megatron`, or its manifest.json;
            or a mixture of stores (a mixture.json, a `Mixture`, a list of (name, store, weight):
            pipeline/reader/engine/doc_mixture.py).
        global_batch_size: sequences per global step, over all ranks (the first segment's).
        seq_len: labels per sequence (the first segment's).
        dp_rank: this rank's data-parallel index.
        dp_size: number of data-parallel ranks.
        seed: base seed of the order; required when shuffling.
        shuffle: False reads the store's order.
        packing: "concat" or "best_fit".
        epoch: the run's first epoch.
        start_step: the first global step to yield (without a state).
        num_epochs: epochs to read (None: forever).
        num_steps: global steps to yield from the start (None: until the epochs end).
        shuffle_buffer: sequences per window (None: ~8 MiB of token ids).
        pack_window: best_fit: documents per packing window.
        schedule: changes of seq_len / global batch size from a step on (as make_dataset's).
        state: a state from `state_dict()` or `store_state()` to continue from.
        verify: also check every .bin's sha256 before step 0.
        features: optional features besides inputs/labels/loss_mask ("segment_ids", "positions";
            None: both).
        read_ahead: chunks of steps filled ahead by threads, without DataLoader workers (order unchanged).
    """

    def __init__(self, store, *, global_batch_size: int, seq_len: int, dp_rank: int = 0, dp_size: int = 1,
                 seed: int | None = None, shuffle: bool = True, packing: str = "concat", epoch: int = 0,
                 start_step: int = 0, num_epochs: int | None = None, num_steps: int | None = None,
                 shuffle_buffer: int | None = None, pack_window: int = DEFAULT_PACK_WINDOW, schedule=None,
                 state: dict | None = None, verify: bool = False, features=None, read_ahead: int = 2):
        settings = StoreSettings(
            global_batch_size=global_batch_size, seq_len=seq_len, packing=packing, seed=seed,
            shuffle=shuffle, epoch=epoch, start_step=start_step, num_epochs=num_epochs, num_steps=num_steps,
            shuffle_buffer=shuffle_buffer, pack_window=pack_window, schedule=schedule, state=state,
            verify=verify, features=features)
        self._threads = integer("read_ahead", read_ahead, 1, MAX_PARALLEL_READS)
        self._location = load_mixture(store) if is_mixture(store) else store
        self._ranks = check_ranks(dp_rank, dp_size)
        self._reader = open_reader(self._location, settings, *self._ranks)
        self._next = self._reader.start
        self._own = False  # whether _next is this copy's own position (a worker's, once restored or iterated)
        self._ended = False  # the run's last step was yielded (a finite number of epochs)

    # DataLoader workers get a copy: the settings travel, the store is opened (not checked) again.
    def __getstate__(self):
        return {"location": self._location, "ranks": self._ranks, "settings": self._reader.settings,
                "threads": self._threads,
                "next": self._next, "stop": self._reader.stop, "own": self._own, "ended": self._ended}

    def __setstate__(self, state):
        self._location, self._ranks, self._threads = state["location"], state["ranks"], state["threads"]
        self._reader = open_reader(self._location, state["settings"], *self._ranks, check=False)
        self._reader.stop = state["stop"]
        if state["next"] != self._reader.start:
            self._reader.resume(self._reader.state(state["next"]))
        self._next, self._own, self._ended = state["next"], state["own"], state["ended"]

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        reader = self._reader
        if self._ended:
            return
        # This worker's steps: the dataset's position + worker, then every `workers`-th; a worker whose
        # own position was restored goes on from it.
        first = self._next if self._own else self._next + worker
        if first != reader.start:
            reader.resume(reader.state(first))
        self._next, self._own = first, True
        if workers == 1:
            yield from self._read_ahead(reader)
            self._ended = True
            return
        for window, from_step, seqs in reader.plans():  # a worker fills its own batches only
            for s in range(len(seqs)):
                if from_step + s >= first and (from_step + s - first) % workers == 0:
                    batch = reader.fill_raw(window, seqs[s : s + 1])
                    self._next = from_step + s + workers
                    yield _tensors({k: v[0] for k, v in batch.items()}, reader.features)
        self._ended = True

    def _read_ahead(self, reader):
        """The rank's batches, in order, the next chunks filled by threads meanwhile.

        The reads and copies release the GIL, as tf.data's parallel fills do; each batch is made a
        tensor here, as it is yielded.
        """
        pending: collections.deque = collections.deque()
        with concurrent.futures.ThreadPoolExecutor(self._threads) as pool:
            plans = reader.plans()
            while True:
                while len(pending) < self._threads + 1:
                    plan = next(plans, None)
                    if plan is None:
                        break
                    window, from_step, seqs = plan
                    pending.append((from_step, len(seqs), pool.submit(reader.fill_raw, window, seqs)))
                if not pending:
                    return
                from_step, steps, future = pending.popleft()
                chunk = future.result()
                for s in range(steps):
                    self._next = from_step + s + 1
                    yield _tensors({k: v[s] for k, v in chunk.items()}, reader.features)

    def state_dict(self) -> dict:
        """The order's state at the next step this dataset (or DataLoader worker) yields (module docstring)."""
        if self._ended:
            return {"order": None, "next": self._next, "ended": True}
        return {"order": self._reader.state(self._next), "next": self._next}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a `state_dict()` (or a `store_state()`), saved on this or another number of ranks.

        Every field is checked (the order's state against the store, pipeline/reader/engine/doc_state.py):
        `StoreStateError` naming the field.
        """
        if not isinstance(state, dict) or "next" not in state:  # a store_state() itself
            self._reader.resume(state)
            self._next, self._own, self._ended = self._reader.start, True, False
            return
        ended = state.get("ended", False)
        exact_keys(state, ("order", "next", "ended") if "ended" in state else ("order", "next"), "state_dict")
        if ended is not True and ended is not False:
            raise StoreStateError(f"state_dict field ended {ended!r}: True or False")
        step = integer("state_dict field next", state["next"], 0, MAX_STEPS, error=StoreStateError)
        if ended:
            if state["order"] is not None:
                raise StoreStateError("state_dict field order: None once the run has ended")
            self._next, self._own, self._ended = step, True, True
            return
        order = state["order"]
        if isinstance(order, dict) and order.get("step") != step:
            raise StoreStateError(f"state_dict field next {step} is not its order's step {order.get('step')!r}")
        self._reader.resume(order)
        self._next, self._own, self._ended = step, True, False
