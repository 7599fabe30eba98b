"""The global order of a document store read at any length: which sequences form global batch k, and the state.

Pure NumPy over a stream of sequences (pipeline/reader/engine/doc_stream.py), the same on every rank.

**Schedule.** Segments ``(step, global batch G, seq_len L)``, the first at step 0: from its step on,
each global step takes G sequences of L labels from the stream (`schedule` entries change either or
both at any step, decided before the run or added at a resume; below).

**Windows.** A segment's steps are grouped in windows of ``S = max(1, window // G)`` steps from the
segment's first step (`window`: sequences per window, ~8 MiB of token ids by default, as the
TFRecord reader's); a segment's last window ends where the next segment starts. A window of k
steps takes the stream's next k * G sequences, as G *columns* of k consecutive sequences: column p
gives position p of each of the window's k batches, in an order permuted by (seed, window's first
step, p), so a long document's consecutive sequences go to different batches of the window.
Without shuffling, sequence i of a window goes to batch i mod k (a window of one step is the
stream's order).

**Ranks.** With W ranks of B = G / W, rank r takes positions [r*B, (r+1)*B) of every batch: columns
[r*B, (r+1)*B) of every window, one contiguous run of the window's sequences. Global batch k is the
same for any W; a rank reads only the documents (and the ranges of them) its sequences hold.

**State** (`StoreOrder.state(step)`): a small dict: the order's identity (store, packing, seed,
window, first epoch), the schedule so far, the step, and the stream's cursor at the start of the
window holding that step (the window is taken again on resume and its first batches dropped),
sealed by a digest of its fields. Resume on any number of ranks: the same batches. A state read
back is checked field by field against the store, then against its seal
(pipeline/reader/engine/doc_state.py). The order remembers the cursors at recent window starts and
always at its first one (step 0, or the resume point), so a new iterator from there finds it. A
schedule entry may be added at a resume from the state's step on when that step starts a window; a
state saved inside a window (its steps dealt together, some consumed) takes entries from that
window's end on (at most S steps later): an entry inside it would deal the consumed steps anew.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core import read_packing
from pipeline.core.hashing import fold64, mix64
from pipeline.reader.engine.doc_state import StoreStateError, check_seal, field, int_field, seal
from pipeline.reader.engine.plan import default_window
from pipeline.reader.engine.request import MAX_SEQ_LEN, MAX_STEP_LABELS, MAX_STEPS, integer

STORE_ORDER = "docstore-columns-1"  # names this algorithm; a state under another is refused
_COLUMN_TAG = 0x4443  # "DC"
_KEEP_ANCHORS = 256


@dataclasses.dataclass(frozen=True)
class Segment:
    """From global step `step` on: `global_batch` sequences of `seq_len` labels per step."""

    step: int
    global_batch: int
    seq_len: int


_ENTRY_KEYS = ("step", "seq_len", "global_batch_size")


def schedule_entries(schedule) -> tuple:
    """A schedule as a tuple of entries (None: none); a dict or a string is refused, not iterated."""
    if schedule is None:
        return ()
    if isinstance(schedule, dict | str | bytes) or not isinstance(schedule, list | tuple):
        raise ValueError(f"schedule {schedule!r}: a list of entries, [{{\"step\": k, \"seq_len\": L, "
                         "\"global_batch_size\": G}, ...]")
    return tuple(schedule)


def parse_schedule(global_batch: int, seq_len: int, schedule=None, error=ValueError) -> tuple[Segment, ...]:
    """The segments: (0, global_batch, seq_len), then each entry's changes from its step on.

    An entry is ``{"step": k, "seq_len": L, "global_batch_size": G}`` (either may be left out:
    unchanged) or ``[k, G, L]`` (the state's form). Steps must be > 0 and increasing; every value
    an integer within the readers' limits (pipeline/reader/engine/request.py). `error`: the type
    raised (a state's schedule: StoreStateError).
    """
    segments = [Segment(0, *_segment_sizes("", integer("global_batch_size", global_batch, 1, MAX_STEP_LABELS,
                                                                error=error),
                                           integer("seq_len", seq_len, 1, MAX_SEQ_LEN, error=error), error))]
    for i, entry in enumerate(schedule_entries(schedule)):
        last = segments[-1]
        where = f"schedule entry {i}"
        if isinstance(entry, dict):
            unknown = sorted(map(str, set(entry) - set(_ENTRY_KEYS)))
            if unknown:
                raise error(f"{where} {entry!r}: unknown key {', '.join(map(repr, unknown))} (the keys: "
                            f"{', '.join(_ENTRY_KEYS)})")
            if "step" not in entry:
                raise error(f"{where} {entry!r}: no 'step' (the first global step of its values)")
            step, g, n = entry["step"], entry.get("global_batch_size", last.global_batch), entry.get(
                "seq_len", last.seq_len)
        elif isinstance(entry, list | tuple) and len(entry) == 3:
            step, g, n = entry
        else:
            raise error(f"{where} {entry!r}: a dict {{\"step\": k, \"seq_len\": L, \"global_batch_size\": G}} "
                        "or a list [step, global_batch_size, seq_len]")
        step = integer(f"{where}: step", step, 0, MAX_STEPS, error=error)
        g = integer(f"{where}: global_batch_size", g, 1, MAX_STEP_LABELS, error=error)
        n = integer(f"{where}: seq_len", n, 1, MAX_SEQ_LEN, error=error)
        if step == 0 and i == 0 and (g, n) == (last.global_batch, last.seq_len):
            continue  # the state's form starts with step 0
        if step <= last.step:
            raise error(f"schedule steps must be > 0 and increasing ({where}: step {step})")
        segments.append(Segment(step, *_segment_sizes(f"{where}: ", g, n, error)))
    return tuple(segments)


def _taken_before(segments: tuple[Segment, ...], step: int) -> tuple[int, int]:
    """(sequences, labels) the steps before `step` take under a schedule."""
    sequences = labels = 0
    for seg, nxt in zip(segments, [*segments[1:], None], strict=True):
        steps = max(0, min(step, nxt.step if nxt else step) - seg.step)
        sequences += steps * seg.global_batch
        labels += steps * seg.global_batch * seg.seq_len
    return sequences, labels


def _segment_sizes(where: str, global_batch: int, seq_len: int, error) -> tuple[int, int]:
    if global_batch * seq_len > MAX_STEP_LABELS:
        raise error(f"{where}global_batch_size {global_batch} x seq_len {seq_len}: a global step of more than "
                    f"{MAX_STEP_LABELS} labels")
    return global_batch, seq_len


def column_picks(seed: int | None, shuffle: bool, first_step: int, steps: int, first_column: int,
                 columns: int) -> np.ndarray:
    """int64 [columns, steps]: the sequence of column `first_column + j` that goes to the window's batch s.

    Column p's sequences are the window's [p * steps, (p + 1) * steps); picks[j, s] is the index in
    that column of the one batch s takes.
    """
    if not shuffle:
        return np.tile(np.arange(steps, dtype=np.int64), (columns, 1))
    base = np.uint64(fold64(_COLUMN_TAG, seed, first_step))
    cols = np.arange(first_column, first_column + columns, dtype=np.uint64)[:, None]
    s = np.arange(steps, dtype=np.uint64)[None, :]
    keys = mix64(base ^ mix64((cols << np.uint64(32)) | s))
    return np.argsort(keys, axis=1, kind="stable").astype(np.int64)


@dataclasses.dataclass
class Window:
    """Steps [first, first + steps) of one segment and the stream's sequences they take (all ranks')."""

    first: int
    steps: int
    segment: Segment
    layout: read_packing.Layout
    seed: int | None
    shuffle: bool

    def batch_sequences(self, step: int, dp_rank: int = 0, dp_size: int = 1) -> np.ndarray:
        """Indices into `layout` of the rank's sequences of global step `step`, in batch order."""
        g = self.segment.global_batch
        if dp_size < 1 or g % dp_size or not 0 <= dp_rank < dp_size:
            raise ValueError(f"dp_rank {dp_rank} / dp_size {dp_size} must split the global batch {g}")
        b = g // dp_size
        s = step - self.first
        if not 0 <= s < self.steps:
            raise ValueError(f"step {step} is not in the window's steps [{self.first}, {self.first + self.steps})")
        picks = column_picks(self.seed, self.shuffle, self.first, self.steps, dp_rank * b, b)
        return (np.arange(dp_rank * b, (dp_rank + 1) * b, dtype=np.int64) * self.steps + picks[:, s]).astype(np.int64)

    def rank_sequences(self, dp_rank: int, dp_size: int, from_step: int | None = None) -> np.ndarray:
        """int64 [steps, B]: the rank's sequences of every step of the window from `from_step` (default: all)."""
        g = self.segment.global_batch
        b = g // dp_size
        picks = column_picks(self.seed, self.shuffle, self.first, self.steps, dp_rank * b, b)
        cols = np.arange(dp_rank * b, (dp_rank + 1) * b, dtype=np.int64)[:, None]
        out = (cols * self.steps + picks).T  # [steps, B]
        first = 0 if from_step is None else from_step - self.first
        return np.ascontiguousarray(out[first:])


_GONE = object()  # a pruned anchor

class StoreOrder:
    """The global order of a store's batches for a schedule, seed and window (module docstring).

    Args:
        open_stream: ``open_stream(cursor)`` -> a fresh stream (doc_stream.py) from a cursor (None: the start).
        identity: what the order depends on besides the schedule (store, packing, seed, window, ...);
            a state saved under another identity is refused.
        segments: the schedule (`parse_schedule`).
        seed: base seed (None without shuffling).
        shuffle: whether columns are dealt in a seeded order.
        window: sequences per window, or None: `default_window(seq_len, token_bytes)` per segment.
        token_bytes: bytes per token id (for the default window).
        state: a state from `state()` to continue from (its step is `start_step`).
    """

    def __init__(self, open_stream, identity: dict, segments: tuple[Segment, ...], *, seed: int | None,
                 shuffle: bool, window: int | None, token_bytes: int, state: dict | None = None):
        if window is not None and window < 1:
            raise ValueError(f"window {window} must be >= 1")
        self._open = open_stream
        self.identity = {"order": STORE_ORDER, **identity, "seed": seed, "shuffle": bool(shuffle), "window": window}
        self.segments = tuple(segments)
        self.seed, self.shuffle, self.window, self.token_bytes = seed, bool(shuffle), window, int(token_bytes)
        self._known: dict[int, dict | None] = {0: None}  # window start -> the stream's cursor there
        self._origin = 0  # the first anchor (never pruned)
        self.start_step = 0
        if state is not None:
            self._resume(state)

    # -- schedule and windows ------------------------------------------------------------------

    def segment_of(self, step: int) -> int:
        """Index of the segment holding `step`."""
        steps = [s.step for s in self.segments]
        return int(np.searchsorted(steps, step, side="right")) - 1

    def window_steps(self, segment: Segment) -> int:
        """S: steps per window in a segment."""
        window = self.window or default_window(segment.seq_len, self.token_bytes)
        return max(1, window // segment.global_batch)

    def window_bounds(self, step: int, segments: tuple[Segment, ...] | None = None) -> tuple[int, int, Segment]:
        """(first step, end step, segment) of the window holding `step`."""
        segments = segments or self.segments
        i = int(np.searchsorted([s.step for s in segments], step, side="right")) - 1
        seg = segments[i]
        per = self.window_steps(seg)
        first = seg.step + (step - seg.step) // per * per
        end = first + per
        if i + 1 < len(segments):
            end = min(end, segments[i + 1].step)
        return first, end, seg

    # -- state ---------------------------------------------------------------------------------

    def _resume(self, state: dict) -> None:
        # Every field checked (pipeline/reader/engine/doc_state.py), the seal last: an edit that
        # passes the fields' own checks still changes the digest.
        if not isinstance(state, dict) or state.get("order") != STORE_ORDER:
            order = state.get("order") if isinstance(state, dict) else type(state).__name__
            raise StoreStateError(f"the state's order {order!r} is not {STORE_ORDER!r}: it was saved by another "
                                  "reader")
        for key, value in self.identity.items():
            if field(state, key) != value:
                raise StoreStateError(f"the state was saved with {key}={state.get(key)!r}, this reader has "
                                      f"{value!r}: resume with the run's store and settings")
        step = int_field(state, "step", 0, MAX_STEPS)
        old = self._state_schedule(field(state, "schedule"))
        before_old = [s for s in old if s.step < step]
        before_new = [s for s in self.segments if s.step < step]
        if before_old != before_new:
            raise StoreStateError(
                f"the schedule before step {step} ({[dataclasses.astuple(s) for s in before_new]}) is not the one "
                f"the run used ({[dataclasses.astuple(s) for s in before_old]}): steps already run cannot change; "
                f"change the schedule from step {step} on")
        first, end, seg = self.window_bounds(step, old)
        window_start = int_field(state, "window_start", 0, MAX_STEPS)
        if first != window_start:
            raise StoreStateError(f"state field window_start {window_start} is not the window of step {step} under "
                                  f"its schedule (it starts at step {first})")
        if step > first and self.window_bounds(step) != (first, end, seg):
            raise StoreStateError(
                f"the state's step {step} is inside steps {first}..{end - 1}, which the reader deals together "
                f"(a window of {self.window_steps(seg)} steps): keep the run's schedule before step {end} "
                f"and change it from step {end} on")
        cursor = field(state, "cursor")
        self._open(cursor).check_taken(*_taken_before(old, first))  # the cursor against the store
        check_seal(state)
        self._known = {first: cursor}
        self._origin = first
        self.start_step = step

    @staticmethod
    def _state_schedule(schedule) -> tuple[Segment, ...]:
        if (not isinstance(schedule, list) or not schedule or not isinstance(schedule[0], list)
                or len(schedule[0]) != 3 or schedule[0][0] != 0):
            raise StoreStateError(f"state field schedule {schedule!r}: a list of [step, global_batch_size, seq_len], "
                                  "the first at step 0")
        return parse_schedule(schedule[0][1], schedule[0][2], schedule[1:], error=StoreStateError)

    def state(self, step: int) -> dict:
        """The state after `step` global steps: a small JSON-able dict to save beside a checkpoint (sealed)."""
        first, _, _ = self.window_bounds(step)
        cursor = self._cursor_at(first)
        return seal({**self.identity, "schedule": [[s.step, s.global_batch, s.seq_len] for s in self.segments],
                     "step": int(step), "window_start": int(first), "cursor": cursor})

    def _cursor_at(self, first: int):
        """The stream's cursor at the start of the window that starts at `first` (walking from the nearest known)."""
        if first not in self._known:
            for window in self.windows(self._nearest(first), stop=first):
                del window
        if first not in self._known:
            raise ValueError(f"step {first} is past the end of the run")
        return self._known[first]

    def _nearest(self, step: int) -> int:
        known = [k for k in list(self._known) if k <= step]  # list(): a copy taken at once (GIL)
        if not known:
            raise ValueError(f"step {step} is before the resume point (step {self.start_step})")
        return max(known)

    # -- the windows ---------------------------------------------------------------------------

    def windows(self, from_step: int | None = None, stop: int | None = None):
        """The windows from the one holding `from_step` (default: the start step) on; `stop`: a step to end before.

        Ends after the stream's last labels (a finite run: the last window keeps only the steps that
        hold some).
        """
        from_step = self.start_step if from_step is None else int(from_step)
        first, _, _ = self.window_bounds(from_step)
        anchor, cursor = self._anchor(first)
        stream = self._open(cursor)
        step = anchor
        while stop is None or step < stop:
            w_first, w_end, seg = self.window_bounds(step)
            steps = w_end - w_first
            layout = stream.take(steps * seg.global_batch, seg.seq_len)
            real = layout.real()
            if real < layout.count:  # the stream's end: keep the steps that hold labels
                steps = -(-real // seg.global_batch)
                if steps == 0:
                    return
                layout = layout.select(np.arange(steps * seg.global_batch))
            else:
                self._remember(w_end, stream.cursor())
            if w_first >= first:
                yield Window(w_first, steps, seg, layout, self.seed, self.shuffle)
            if w_first + steps < w_end:
                return
            step = w_end

    def _anchor(self, step: int) -> tuple[int, dict | None]:
        # Two iterators of one dataset may share this order: an anchor another pruned is looked up again.
        while True:
            anchor = self._nearest(step)
            cursor = self._known.get(anchor, _GONE)
            if cursor is not _GONE:
                return anchor, cursor

    def _remember(self, first: int, cursor) -> None:
        self._known[first] = cursor
        if len(self._known) > 2 * _KEEP_ANCHORS:
            # The start (step 0, or the resume point) stays: a new iterator from it walks from there.
            for k in sorted(self._known)[:-_KEEP_ANCHORS]:
                if k != self._origin:
                    self._known.pop(k, None)

    def batch(self, step: int) -> tuple[Window, np.ndarray]:
        """The window holding global step `step` and the indices of its G sequences in batch order."""
        for window in self.windows(step):
            if step < window.first + window.steps:
                return window, window.batch_sequences(step)
            break
        raise ValueError(f"step {step} is past the end of the run")
