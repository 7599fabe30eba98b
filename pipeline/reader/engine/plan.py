"""The reader's global order: which records form global batch k, the same for any number of ranks.

Pure NumPy, computed identically on every rank; every seeded decision comes from
pipeline/core/hashing.py (nothing depends on timing, the clock, threads or the number of ranks).

One epoch, for a global batch of G records (G = per-rank batch x number of ranks):

1. **Stream.** The shards are concatenated in the epoch's shard order (a permutation from
   (seed, epoch)) and the concatenation is rotated to start at a seeded position, so that the
   windows below fall on other records every epoch. Without shuffling: manifest order, no rotation.
   The epoch has ``steps = N // G`` global batches; the last ``N - steps * G`` records of the stream
   (fewer than G) are left out of that epoch.
2. **Windows.** The stream's first ``steps * G`` records are cut into windows of whole global
   batches: about ``window`` records each (``S = max(1, window // G)`` batches; the windows' sizes
   are then evened out so that they differ by at most one batch, which keeps the shuffle the same
   at the end of the epoch as at its start).
3. **Columns.** A window of ``S_w`` batches is read as G *columns* of ``S_w`` consecutive records;
   column p supplies position p of each of the window's batches, in an order permuted by a hash of
   (seed, epoch, window, p). So every global batch holds one record from each column, i.e. from
   all over its window, and a record's batch within its window is uniformly random. Without
   shuffling the columns keep their order: record i of a window goes to batch ``i mod S_w``,
   position ``i div S_w`` (with S_w = 1, or G = 1, that is the manifest's order).
4. **Ranks.** With W ranks of B = G / W records each, rank r takes positions [r*B, (r+1)*B) of
   every global batch: columns [r*B, (r+1)*B) of every window, which are *one contiguous run* of
   ``B * S_w`` records of the stream. A rank reads only the records it uses, in runs of about
   ``window / W`` records, whatever W is; the global batches do not depend on W at all.

Worked example: shards of [5, 3, 4] records, no shuffling, G = 4, window 4 (so S = 1: a window is
one global batch): N = 12, steps = 3, global batch 1 = stream records 4..7 = shard 0 record 4 and
shard 1 records 0-2. With W = 2 (B = 2), rank 0 gets shard 0 record 4, shard 1 record 0; rank 1
gets shard 1 records 1-2. With shuffling and window 8, S = 2: the 3 batches form windows of 1 and
2 batches; the second is 4 columns of 2 records, and each of its batches takes one record of each
column, as the column's permutation says.

A position in the epoch is a global step, so resuming at step k is the same for any W: the window
holding k is re-read (at most one window) and its first batches dropped.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core.hashing import fold64, keyed_permutation, mix64

WINDOW_BYTES = 8 << 20  # default window: ~8 MiB of token ids (2048 records at seq_len 2048, uint16)
MIN_WINDOW, MAX_WINDOW = 256, 8192  # default window bounds, in records
DEFAULT_PARALLEL_READS = 4  # pieces (a window's run in one shard) each rank reads concurrently
# Names the algorithm below: a checkpoint records it, so that a resume under another order is refused.
ORDER = "global-columns-1"
_SHARD_ORDER_TAG = 0x5348  # domain separation: "SH"
_ROTATION_TAG = 0x524F  # "RO"
_COLUMN_TAG = 0x434F  # "CO"


def default_window(seq_len: int, token_bytes: int) -> int:
    """Records per window when `shuffle_buffer` is not given: ~WINDOW_BYTES of token ids.

    Args:
        seq_len: the manifest's seq_len.
        token_bytes: bytes per token id (2 for uint16, 4 for int32).

    Returns:
        Records per window, within [MIN_WINDOW, MAX_WINDOW].
    """
    return int(min(MAX_WINDOW, max(MIN_WINDOW, WINDOW_BYTES // (max(1, seq_len) * token_bytes))))


def steps_for(total_records: int, batch_size: int, dp_size: int = 1) -> int:
    """Global batches per epoch: total_records // (batch_size * dp_size)."""
    if batch_size < 1 or dp_size < 1:
        raise ValueError(f"batch_size ({batch_size}) and dp_size ({dp_size}) must be >= 1")
    return int(total_records) // (batch_size * dp_size)


def shard_order(num_shards: int, seed: int | None, epoch: int, shuffle: bool) -> np.ndarray:
    """The epoch's shard order: a permutation of range(num_shards) from (seed, epoch), or identity."""
    if not shuffle:
        return np.arange(num_shards, dtype=np.int64)
    return keyed_permutation(fold64(_SHARD_ORDER_TAG, seed, epoch), num_shards)


@dataclasses.dataclass(frozen=True)
class GlobalOrder:
    """One epoch's order of records for a global batch size: the same for any number of ranks.

    Attributes:
        counts: records per shard, in manifest order.
        global_batch: G, records per global batch.
        seed: base seed (None without shuffling).
        epoch: the epoch.
        shuffle: whether shards, rotation and columns are permuted.
        steps: global batches in the epoch.
        order: the shard order (manifest indices).
        rotation: the stream starts at this position of the shards' concatenation.
        window_starts: first global step of each window, then `steps`.
    """

    counts: np.ndarray
    global_batch: int
    seed: int | None
    epoch: int
    shuffle: bool
    steps: int
    order: np.ndarray
    rotation: int
    window_starts: np.ndarray

    @property
    def num_windows(self) -> int:
        """Windows in the epoch."""
        return len(self.window_starts) - 1


def global_order(counts, global_batch: int, *, seed: int | None = None, epoch: int = 0, shuffle: bool = True,
                 window: int = 2048) -> GlobalOrder:
    """The epoch's global order (see the module docstring).

    Args:
        counts: records per shard, in manifest order.
        global_batch: records per global batch (per-rank batch x ranks).
        seed: base seed; required when shuffling.
        epoch: the epoch (changes shard order, rotation and column permutations).
        shuffle: False keeps the manifest's order of shards and of each window's columns.
        window: records per window (the shuffle unit), before rounding to whole global batches.

    Returns:
        The order.
    """
    if shuffle and seed is None:
        raise ValueError("shuffling needs a seed (pass seed=<int>, or shuffle=False)")
    if global_batch < 1 or window < 1:
        raise ValueError(f"global_batch ({global_batch}) and window ({window}) must be >= 1")
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    steps = steps_for(total, global_batch)
    order = shard_order(len(counts), seed, epoch, shuffle)
    rotation = fold64(_ROTATION_TAG, seed, epoch) % total if shuffle and total else 0
    per_window = max(1, window // global_batch)
    windows = -(-steps // per_window)
    starts = (np.arange(windows + 1, dtype=np.int64) * steps) // max(1, windows)
    return GlobalOrder(counts, int(global_batch), seed, int(epoch), bool(shuffle), steps, order, int(rotation),
                       starts)


def stream_location(order: GlobalOrder, positions) -> tuple[np.ndarray, np.ndarray]:
    """(shard, record in shard) of stream positions (vectorized)."""
    sizes = order.counts[order.order]
    ends = np.cumsum(sizes)
    c = (np.asarray(positions, np.int64) + order.rotation) % max(1, int(ends[-1]) if len(ends) else 1)
    i = np.searchsorted(ends, c, side="right")
    return order.order[i], c - (ends[i] - sizes[i])


def column_picks(seed: int | None, epoch: int, shuffle: bool, window_index: int, batches: int,
                 first_column: int, columns: int) -> np.ndarray:
    """The order in which columns of a window give their records to the window's batches.

    Returns:
        int64 [columns, batches]: record picks[j, s] of column `first_column + j` goes to batch s.
    """
    if not shuffle:
        return np.tile(np.arange(batches, dtype=np.int64), (columns, 1))
    base = np.uint64(fold64(_COLUMN_TAG, seed, epoch, window_index))
    cols = np.arange(first_column, first_column + columns, dtype=np.uint64)[:, None]
    s = np.arange(batches, dtype=np.uint64)[None, :]
    keys = mix64(base ^ mix64((cols << np.uint64(32)) | s))
    return np.argsort(keys, axis=1, kind="stable").astype(np.int64)


def window_gather(seed: int | None, epoch: int, shuffle: bool, window_index: int, batches: int,
                  first_column: int, columns: int) -> np.ndarray:
    """Gather indices turning a rank's run of one window (column-major) into its batches, in order.

    The run holds `columns` columns of `batches` records each; the result's entry s * columns + j
    is the run index of the record at row j of the rank's batch s.
    """
    picks = column_picks(seed, epoch, shuffle, window_index, batches, first_column, columns)
    return (np.arange(columns, dtype=np.int64)[None, :] * batches + picks.T).reshape(-1)


def _window_of(order: GlobalOrder, step: int) -> int:
    return int(np.searchsorted(order.window_starts, step, side="right")) - 1


def batch_records(order: GlobalOrder, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(shard, record in shard) of the G records of global batch `step` of the epoch, in batch order."""
    if not 0 <= step < order.steps:
        raise ValueError(f"step {step} outside the epoch's [0, {order.steps})")
    w = _window_of(order, step)
    first, batches = int(order.window_starts[w]), int(order.window_starts[w + 1] - order.window_starts[w])
    g = order.global_batch
    picks = column_picks(order.seed, order.epoch, order.shuffle, w, batches, 0, g)
    positions = first * g + np.arange(g, dtype=np.int64) * batches + picks[:, step - first]
    return stream_location(order, positions)


@dataclasses.dataclass(frozen=True)
class RankPlan:
    """What one rank reads in one epoch, from a resume point on.

    Attributes:
        steps: batches per epoch (the same on every rank).
        start_step: the first batch this plan yields.
        batch_size: B, this rank's records per batch.
        first_column: the rank's first position in each global batch (dp_rank * B).
        windows: int64 [K, 6] (window index, batches, records, records to drop, first read, reads),
            in the order the rank consumes them; only the first can drop records (a resume).
        reads: int64 [R, 3] (shard, first record, records): each window's run of the stream, split
            at shard boundaries, window after window.
    """

    steps: int
    start_step: int
    batch_size: int
    first_column: int
    windows: np.ndarray
    reads: np.ndarray


def rank_plan(order: GlobalOrder, dp_rank: int, dp_size: int, start_step: int = 0) -> RankPlan:
    """This rank's windows and reads for the epoch, from global step `start_step` on.

    Args:
        order: the epoch's global order.
        dp_rank: this rank, in [0, dp_size).
        dp_size: number of ranks W; must divide the global batch.
        start_step: first global step to produce, in [0, steps].

    Returns:
        The plan.
    """
    g = order.global_batch
    if dp_size < 1 or g % dp_size:
        raise ValueError(f"the global batch {g} is not a multiple of dp_size {dp_size}")
    if not 0 <= dp_rank < dp_size:
        raise ValueError(f"dp_rank {dp_rank} outside [0, {dp_size})")
    if not 0 <= start_step <= order.steps:
        raise ValueError(f"start_step {start_step} outside [0, {order.steps}]")
    b = g // dp_size
    first_col = dp_rank * b
    w0 = _window_of(order, start_step) if start_step < order.steps else order.num_windows
    ws = np.arange(w0, order.num_windows, dtype=np.int64)
    firsts = order.window_starts[ws]
    batches = order.window_starts[ws + 1] - firsts
    run_start = firsts * g + first_col * batches  # stream position of the rank's run in each window
    run_len = b * batches
    drop = np.zeros(len(ws), np.int64)
    if len(ws):
        drop[0] = (start_step - firsts[0]) * b

    # Split the runs at shard boundaries, in the (rotated) concatenation of the shards. The runs
    # lie in [0, N) of the stream, so in [0, 2N) of the concatenation repeated twice.
    sizes = np.tile(order.counts[order.order], 2)
    shards = np.tile(order.order, 2)
    ends = np.cumsum(sizes)
    begins = ends - sizes
    a = run_start + order.rotation
    z = a + run_len  # exclusive
    i_first = np.searchsorted(ends, a, side="right")
    i_last = np.searchsorted(ends, z - 1, side="right")
    pieces = i_last - i_first + 1
    owner = np.repeat(np.arange(len(ws)), pieces)
    idx = np.repeat(i_first, pieces) + np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    lo = np.maximum(a[owner], begins[idx])
    hi = np.minimum(z[owner], ends[idx])
    keep = hi > lo  # empty shards inside a run give empty pieces
    owner, idx, lo, hi = owner[keep], idx[keep], lo[keep], hi[keep]
    reads = np.stack([shards[idx], lo - begins[idx], hi - lo], axis=1).reshape(-1, 3).astype(np.int64)
    per_window = np.bincount(owner, minlength=len(ws)).astype(np.int64)
    first_read = np.cumsum(per_window) - per_window
    windows = np.stack([ws, batches, run_len, drop, first_read, per_window], axis=1).reshape(-1, 6)
    return RankPlan(order.steps, int(start_step), b, first_col, windows.astype(np.int64), reads)
