"""The order of a mixture: which source, and which of its records, fills each position of global batch k.

Pure NumPy, the same on every rank; a function of the sources' record counts, the schedule of
weights, the global batch size G, the seed and the window, never of the number of ranks.

1. **Blend.** Global step k holds the mixture's samples [k*G, (k+1)*G). Within a segment of the
   schedule (constant weights) each sample's source comes from `pipeline.core.blend.blend`: after
   any n samples of the segment every source's count is within 1 of n x its weight.
2. **Per-source streams.** Source d's j-th sample (counted over the whole run) is record
   ``j mod N_d`` of its epoch ``j div N_d``: its shards in a per-(seed, source, epoch) order,
   rotated to a seeded start, as the single-output reader's stream (pipeline/reader/engine/plan.py).
   A source that runs out starts its own next epoch; the others are unaffected.
3. **Windows.** Steps are grouped in windows of S = max(1, window // G) steps, from step 0; a
   schedule step inside a window splits it in parts (a window without one is one part). Within a
   part, source d's samples [c_d(start), c_d(end)) are dealt to its positions column by column
   (position p of the global batch, then the part's steps in a per-(seed, window, p) order): every
   part consumes exactly the next samples of each source, the samples of a column are one
   contiguous run, and the steps before a schedule step hold the same records whatever the
   weights after it.
4. **Ranks.** Rank r of W takes positions [r*B, (r+1)*B) of every global batch (B = G / W): columns
   that hold, for each source, one contiguous run of its stream per part. A rank reads only the
   records it uses.

The state after step k (`MixtureOrder.state`) is a small dict: the step, each source's samples
taken (and so its epoch), where the window and the segment holding k started, the schedule, and
what the order depends on. Resuming from it, on any number of ranks, re-reads at most one window.
"""

from __future__ import annotations

import threading

import numpy as np

from pipeline.core.blend import blend, segment_of
from pipeline.core.hashing import fold64, mix64, stable_hash
from pipeline.format.manifest import load_manifest
from pipeline.format.mixture import MixtureError, load_mixture
from pipeline.reader.engine.plan import default_window, shard_order
from pipeline.reader.engine.request import MAX_STEPS, integer

MIXTURE_ORDER = "mixture-edf-columns-1"  # names this algorithm; a state under another is refused
_SOURCE_TAG = 0x4D53  # "MS"
_ROTATION_TAG = 0x524F  # "RO", as plan.py
_SLOT_TAG = 0x534C  # "SL"
_KEEP_WINDOWS = 256  # window starts remembered behind the latest (a few KiB)
_KEEP_STREAMS = 4096  # (source, epoch) shard orders kept


class MixtureOrder:
    """The global order of a mixture for a global batch size, seed and window (see the module docstring).

    Args:
        names: source names, in the mixture's order.
        counts: per source, its records per shard (manifest order).
        schedule: (step, weights per source) pairs, the first at step 0.
        global_batch: G.
        seed: base seed (None without shuffling).
        shuffle: False keeps each source's manifest order and deals each column's samples in step order.
        window_steps: S, steps per window.
        state: a state dict from `state()` to continue from (its step is `start_step`).
        state_error: the exception a state field of the wrong type or range raises.
    """

    def __init__(self, names, counts, schedule, global_batch: int, *, seed: int | None, shuffle: bool,
                 window_steps: int, state: dict | None = None, state_error: type[ValueError] = MixtureError):
        if shuffle and seed is None:
            raise ValueError("shuffling needs a seed (pass seed=<int>, or shuffle=False)")
        if global_batch < 1 or window_steps < 1:
            raise ValueError(f"global_batch ({global_batch}) and window_steps ({window_steps}) must be >= 1")
        self.names = tuple(names)
        self.counts = [np.asarray(c, np.int64) for c in counts]
        self.records = np.array([int(c.sum()) for c in self.counts], np.int64)
        empty = [n for n, r in zip(self.names, self.records, strict=True) if r == 0]
        if empty:
            raise MixtureError(f"sources {empty} hold no records")
        self.schedule = [(int(s), tuple(float(x) for x in w)) for s, w in schedule]
        self.steps = np.array([s for s, _ in self.schedule], np.int64)
        self.global_batch, self.seed, self.shuffle, self.window_steps = int(global_batch), seed, bool(shuffle), int(
            window_steps)
        self._keys = [fold64(_SOURCE_TAG, seed, stable_hash(n)) if shuffle else 0 for n in self.names]
        self._lock = threading.Lock()
        self._state_error = state_error  # what a damaged state's field raises
        self._sources: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # recent windows' blends (each used twice)
        self._streams: dict[tuple[int, int], tuple] = {}
        # counts at the start of known windows: {window: (counts, counts at its segment's start)}
        k = len(self.names)
        self._known = {0: (np.zeros(k, np.int64), np.zeros(k, np.int64))}
        self._origin = 0  # the first window known (never pruned)
        self.start_step = 0
        if state is not None:
            self._resume(state)

    # -- state ---------------------------------------------------------------------------------

    def _identity(self) -> dict:
        return {"order": MIXTURE_ORDER, "global_batch_size": self.global_batch, "seed": self.seed,
                "shuffle": self.shuffle, "window_steps": self.window_steps}

    def _fields(self, state: dict) -> tuple[int, list[str]]:
        """(step, the state's sources): every field's type and range checked, `state_error` naming it."""
        error = self._state_error

        def get(name):
            if name not in state:
                raise error(f"state: no field '{name}' (a state is saved as it was returned, unchanged)")
            return state[name]

        step = integer("state field step", get("step"), 0, MAX_STEPS, error=error)
        window_start = integer("state field window_start", get("window_start"), 0, MAX_STEPS, error=error)
        if window_start != step // self.window_steps * self.window_steps:
            raise error(f"state field window_start {window_start} is not the start of the window of step {step} "
                        f"(windows of {self.window_steps} steps)")
        old = get("sources")
        if (not isinstance(old, list) or not old or not all(isinstance(n, str) for n in old)
                or len(set(old)) != len(old)):
            raise error(f"state field sources {old!r}: the names of the sources, each once")
        records = get("records")
        if not isinstance(records, list) or len(records) != len(old):
            raise error(f"state field records {records!r}: a count per source {old}")
        for i, value in enumerate(records):
            integer(f"state field records[{i}]", value, 1, 1 << 62, error=error)
        schedule = get("schedule")
        if not isinstance(schedule, list) or not schedule:
            raise error(f"state field schedule {schedule!r}: a list of [step, weights]")
        for i, entry in enumerate(schedule):
            if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list)
                    or len(entry[1]) != len(old) or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                                            and x >= 0 for x in entry[1])):
                raise error(f"state field schedule[{i}] {entry!r}: [step, a weight >= 0 per source {old}]")
            integer(f"state field schedule[{i}] step", entry[0], 0, MAX_STEPS, error=error)
        return step, old

    def _resume(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("order") != MIXTURE_ORDER:
            order = state.get("order") if isinstance(state, dict) else type(state).__name__
            raise MixtureError(f"the state's order {order!r} is not {MIXTURE_ORDER!r}: it was saved by another reader")
        for key, value in self._identity().items():
            if state.get(key) != value:
                raise MixtureError(f"the state was saved with {key}={state.get(key)!r}, this reader has {value!r}: "
                                   "resume with the run's settings")
        step, old = self._fields(state)
        gone = [n for n in old if n not in self.names]
        if gone:
            raise MixtureError(
                f"sources {gone} are in the state (the run read them) but not in the mixture: keep them in the "
                f"mixture, with weight 0 from step {step} on in its schedule, to stop reading them")
        if [n for n in self.names if n in old] != old:
            raise MixtureError(f"the mixture lists the sources {list(self.names)} in another order than the state "
                               f"{old}: the order breaks the blend's ties; keep it (new sources may go anywhere)")
        w = int(state["window_start"]) // self.window_steps
        seg = segment_of(self.steps, w * self.window_steps)
        for name in self.names:
            if name in old:
                continue
            before = [s for s, wt in self.schedule if s < step and wt[self.names.index(name)] > 0]
            if before:
                raise MixtureError(
                    f"source {name!r} is not in the state saved at step {step}, but the schedule gives it a "
                    f"weight from step {before[0]}: a source added mid-run starts with weight 0 until a "
                    f"schedule step >= {step}")
        past_new = {s: dict(zip(self.names, wt, strict=True)) for s, wt in self.schedule if s < step}
        past_old = {int(s): dict(zip(old, wt, strict=True)) for s, wt in state["schedule"] if int(s) < step}
        for s in sorted(set(past_new) | set(past_old)):
            a, b = past_old.get(s), past_new.get(s)
            same = a is not None and b is not None and all(a.get(n, 0.0) == b.get(n, 0.0) for n in set(a) | set(b))
            if not same:
                raise MixtureError(
                    f"the schedule at step {s} ({b}) is not the one the run used ({a}): steps before the state's "
                    f"step {step} cannot change; re-weight from step {step} on")
        self._check_part(step, [int(s) for s, _ in state["schedule"]])
        records = dict(zip(old, state["records"], strict=True))
        changed = [n for n in old if int(records[n]) != int(self.records[self.names.index(n)])]
        if changed:
            raise MixtureError(f"sources {changed} hold other records than when the state was saved")

        def per_name(key):
            values = state[key]
            if (not isinstance(values, list) or len(values) != len(old)
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)):
                raise self._state_error(f"the state's counts: state field {key} {values!r} is not a count >= 0 "
                                        f"per source {old}: the state is damaged")
            got = dict(zip(old, values, strict=True))
            return np.array([got.get(n, 0) for n in self.names], np.int64)

        at_window = per_name("counts_at_window")
        segment_start = int(self.steps[seg])
        segment = per_name("segment_counts") if segment_start < w * self.window_steps else at_window
        # Every sample before the window is some source's, and so is every one before its segment.
        if (int(at_window.sum()) != w * self.window_steps * self.global_batch
                or (segment is not at_window and (int(segment.sum()) != segment_start * self.global_batch
                                                  or (segment > at_window).any()))):
            raise MixtureError(f"the state's counts do not add up (counts_at_window {at_window.tolist()}, "
                               f"segment_counts {segment.tolist()} at window {w} of {self.window_steps} steps of "
                               f"{self.global_batch}): the state is damaged")
        self._known = {w: (at_window, segment)}
        self._origin = w
        self.start_step = step

    def _check_part(self, step: int, old_steps: list[int]) -> None:
        # The steps of a part are dealt together: once some of them are consumed, its end is fixed.
        # A schedule step added (or removed) inside the part holding the state's step would deal
        # its consumed steps anew, so their records could repeat or be skipped.
        w = step // self.window_steps
        start, end = w * self.window_steps, (w + 1) * self.window_steps
        first = max([start] + [s for s in old_steps if s <= step])
        if first == step:
            return
        stop = min([end] + [s for s in old_steps if s > step])
        added = [int(s) for s in self.steps if first < s < stop]
        if added or (stop < end and stop not in self.steps.tolist()):
            raise MixtureError(
                f"the state's step {step} is inside steps {first}..{stop - 1}, which the reader deals together "
                f"(part of its window of {self.window_steps} steps): keep the run's schedule steps before step "
                f"{stop}{' and at it' if stop < end else ''}, and re-weight from step {stop} on")

    def parts(self, w: int) -> list[tuple[int, int]]:
        """The parts of window w: (first row, end row) pairs, split at the schedule steps inside it."""
        start = w * self.window_steps
        cuts = [int(s) - start for s in self.steps if start < s < start + self.window_steps]
        bounds = [0, *cuts, self.window_steps]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def state(self, step: int) -> dict:
        """The state after `step` global steps: a small JSON-able dict to save beside a checkpoint."""
        w = step // self.window_steps
        at_window, segment = self._window_start(w)
        counts = at_window.copy()
        done = step - w * self.window_steps
        if done:
            src = self.window_sources(w)[:done].reshape(-1)
            counts += np.bincount(src, minlength=len(self.names))
        return {**self._identity(), "step": int(step), "sources": list(self.names),
                "records": self.records.tolist(), "counts": counts.tolist(),
                "epochs": (counts // self.records).tolist(), "window_start": int(w * self.window_steps),
                "counts_at_window": at_window.tolist(), "segment_counts": segment.tolist(),
                "schedule": [[s, list(wt)] for s, wt in self.schedule]}

    # -- the blend, window by window -----------------------------------------------------------

    def _window_start(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            known = max((k for k in self._known if k <= w), default=None)
            if known is None:
                raise ValueError(f"window {w} is before the resume point (step {self.start_step})")
            while known < w:
                counts, segment = self._known[known]
                src = self._sources_from(known, counts, segment)
                nxt = counts + np.bincount(src.reshape(-1), minlength=len(self.names))
                start = (known + 1) * self.window_steps
                began = int(self.steps[segment_of(self.steps, start)])  # the segment holding the next window
                if began == start:
                    seg_next = nxt
                elif began <= start - self.window_steps:
                    seg_next = segment
                else:  # it began inside this window
                    rows = began - (start - self.window_steps)
                    seg_next = counts + np.bincount(src[:rows].reshape(-1), minlength=len(self.names))
                known += 1
                self._known[known] = (nxt, seg_next)
                for old in [k for k in self._known if k < known - _KEEP_WINDOWS and k != self._origin]:
                    del self._known[old]  # the start (window 0, or the resume point's) stays
            return self._known[w]

    def _sources_from(self, w: int, counts: np.ndarray, segment: np.ndarray) -> np.ndarray:
        cached = self._sources.get(w)
        if cached is not None and np.array_equal(cached[0], counts):
            return cached[1]
        src = self._blend_window(w, counts, segment)
        self._sources = {k: v for k, v in self._sources.items() if k >= w - 2}
        self._sources[w] = (counts, src)
        return src

    def _blend_window(self, w: int, counts: np.ndarray, segment: np.ndarray) -> np.ndarray:
        # Part by part: a part that starts a segment starts its blend; the first part continues the
        # segment holding the window's start, from `segment` (the counts when that segment began).
        out = []
        counts = counts.copy()
        for r0, r1 in self.parts(w):
            start = w * self.window_steps + r0
            i = segment_of(self.steps, start)
            if r0:
                segment = counts.copy()
            done = (start - int(self.steps[i])) * self.global_batch
            src = blend(self.schedule[i][1], (r1 - r0) * self.global_batch, done, counts - segment)
            counts += np.bincount(src, minlength=len(self.names))
            out.append(src)
        return np.concatenate(out).reshape(self.window_steps, self.global_batch)

    def counts_at(self, w: int) -> np.ndarray:
        """int64 [sources]: each source's samples taken before window w."""
        return self._window_start(w)[0].copy()

    def window_sources(self, w: int) -> np.ndarray:
        """int64 [S, G]: the source of every position of the window's global batches."""
        counts, segment = self._window_start(w)
        return self._sources_from(w, counts, segment)

    def window_samples(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, sample index over the run) of every position of the window: two int64 [S, G]."""
        counts, _ = self._window_start(w)
        src = self.window_sources(w)
        s, g = src.shape
        if self.shuffle:  # each column deals its samples to the part's steps in a seeded order
            base = np.uint64(fold64(_SLOT_TAG, self.seed, w))
            cols = np.arange(g, dtype=np.uint64)[None, :]
            rows = np.arange(s, dtype=np.uint64)[:, None]
            keys = mix64(base ^ mix64((cols << np.uint64(32)) | rows))
        # Dealing order: part by part, column by column, then within each column in a seeded order
        # of the part's steps (`within` [rows, G]).
        flat_rows, flat_cols = [], []
        for r0, r1 in self.parts(w):
            if self.shuffle:
                within = r0 + np.argsort(keys[r0:r1], axis=0, kind="stable")
            else:
                within = np.tile(np.arange(r0, r1, dtype=np.int64)[:, None], (1, g))
            flat_rows.append(within.T.reshape(-1))
            flat_cols.append(np.repeat(np.arange(g, dtype=np.int64), r1 - r0))
        flat_rows, flat_cols = np.concatenate(flat_rows), np.concatenate(flat_cols)
        dealt_src = src[flat_rows, flat_cols]
        k = len(self.names)
        onehot = np.zeros((len(dealt_src), k), np.int64)
        onehot[np.arange(len(dealt_src)), dealt_src] = 1
        rank_in_source = (np.cumsum(onehot, axis=0) - onehot)[np.arange(len(dealt_src)), dealt_src]
        samples = np.empty((s, g), np.int64)
        samples[flat_rows, flat_cols] = counts[dealt_src] + rank_in_source
        return src, samples

    # -- per-source streams --------------------------------------------------------------------

    def _stream(self, d: int, epoch: int) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
        """(shard order, rotation, shard sizes and their running ends in that order) of a source's epoch."""
        got = self._streams.get((d, epoch))
        if got is None:  # a window asks for each of its sources' epochs; a small source's epoch, for many
            order = shard_order(len(self.counts[d]), self._keys[d], epoch, self.shuffle)
            rotation = fold64(_ROTATION_TAG, self._keys[d], epoch) % int(self.records[d]) if self.shuffle else 0
            sizes = self.counts[d][order]
            got = (order, int(rotation), sizes, np.cumsum(sizes))
            if len(self._streams) >= _KEEP_STREAMS:
                self._streams.clear()
            self._streams[(d, epoch)] = got
        return got

    def locate(self, source: int, samples) -> tuple[np.ndarray, np.ndarray]:
        """(shard, record in shard) of samples of one source (vectorized)."""
        samples = np.asarray(samples, np.int64)
        n = int(self.records[source])
        shards, recs = np.empty_like(samples), np.empty_like(samples)
        epochs = samples // n
        for e in np.unique(epochs).tolist():
            sel = epochs == e
            order, rotation, sizes, ends = self._stream(source, e)
            c = (samples[sel] % n + rotation) % n
            i = np.searchsorted(ends, c, side="right")
            shards[sel], recs[sel] = order[i], c - (ends[i] - sizes[i])
        return shards, recs

    def runs(self, source: int, first: int, stop: int) -> list[tuple[int, int, int]]:
        """Samples [first, stop) of a source as (shard, first record, records) runs, in sample order."""
        out = []
        n = int(self.records[source])
        j = first
        while j < stop:
            e, i = divmod(j, n)
            take = min(stop - j, n - i)
            order, rotation, sizes, ends = self._stream(source, e)
            pos, left = (i + rotation) % n, take
            while left:
                k = int(np.searchsorted(ends, pos, side="right"))
                within = pos - int(ends[k] - sizes[k])
                m = min(left, int(sizes[k]) - within)
                out.append((int(order[k]), within, m))
                left -= m
                pos = (pos + m) % n
            j += take
        return out

    def rank_window(self, w: int, dp_rank: int, dp_size: int) -> tuple[list[tuple[int, int, int, int]], np.ndarray]:
        """What rank `dp_rank` reads for window w, and how its records form its batches.

        Returns:
            (reads, gather): reads are (source, shard, first record, records) runs; gather (int64
            [S * B]) indexes the reads' records, concatenated, in the order of the rank's batches.
        """
        g = self.global_batch
        if dp_size < 1 or g % dp_size or not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank {dp_rank} / dp_size {dp_size} must split the global batch {g}")
        b = g // dp_size
        src, samples = self.window_samples(w)
        src, samples = src[:, dp_rank * b : (dp_rank + 1) * b], samples[:, dp_rank * b : (dp_rank + 1) * b]
        reads, gather = [], np.empty(src.shape, np.int64)
        offset = 0
        in_part = np.zeros(src.shape, bool)
        for r0, r1 in self.parts(w):
            in_part[:] = False
            in_part[r0:r1] = True
            for d in np.unique(src[r0:r1]).tolist():
                sel = (src == d) & in_part
                first, stop = int(samples[sel].min()), int(samples[sel].max()) + 1
                if stop - first != int(sel.sum()):  # the columns' runs are contiguous by construction
                    raise RuntimeError(f"mixture order: the rank's samples of source {d} are not one run")
                reads.extend((d, shard, r, m) for shard, r, m in self.runs(d, first, stop))
                gather[sel] = offset + samples[sel] - first
                offset += stop - first
        return reads, gather.reshape(-1)

    def batch_records(self, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source, shard, record in shard) of the G records of global batch `step`, in batch order."""
        w = step // self.window_steps
        src, samples = self.window_samples(w)
        row_src, row = src[step - w * self.window_steps], samples[step - w * self.window_steps]
        shards, recs = np.empty_like(row), np.empty_like(row)
        for d in np.unique(row_src).tolist():
            sel = row_src == d
            shards[sel], recs[sel] = self.locate(d, row[sel])
        return row_src, shards, recs


def token_bytes(manifest: dict) -> int:
    """Bytes per token id of an output (2 for uint16, 4 for int32)."""
    return 2 if manifest["features"]["tokens"]["dtype"] == "uint16" else 4


def open_order(mixture, global_batch: int, *, seed: int | None, shuffle: bool = True,
               shuffle_buffer: int | None = None, state: dict | None = None) -> MixtureOrder:
    """The MixtureOrder of a mixture (anything `load_mixture` takes), from its manifests' record counts.

    `shuffle_buffer`: records per window (None: the reader's default for the sources' seq_len).
    """
    mixture = load_mixture(mixture)
    counts, first = [], None
    for source in mixture.sources:
        m = load_manifest(source.manifest)
        first = first or m
        counts.append([int(s["records"]) for s in m["shards"]])
    window = shuffle_buffer or default_window(int(first["seq_len"]), token_bytes(first))
    return MixtureOrder(mixture.names, counts, mixture.schedule, global_batch, seed=seed, shuffle=shuffle,
                        window_steps=max(1, int(window) // int(global_batch)), state=state)
