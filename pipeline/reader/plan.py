"""The reader's plan of one epoch for one rank: pure NumPy, the same on every rank and every run.

See pipeline/reader/dataset.py for the algorithm in words; everything here is a function of the
shards' record counts and the reader's arguments, with every seeded decision made by
pipeline/core/hashing.py's functions (nothing depends on timing, the clock or threads).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core.hashing import fold64, keyed_permutation, mix64

WINDOW_BYTES = 8 << 20  # default window: ~8 MiB of token ids (2048 records at seq_len 2048, uint16)
MIN_WINDOW, MAX_WINDOW = 256, 8192  # default window bounds, in records
DEFAULT_PARALLEL_READS = 4  # lanes: shards read concurrently per rank
_SHARD_ORDER_TAG = 0x5348  # domain separation: "SH"
_WINDOW_TAG = 0x5749  # "WI"


def default_window(seq_len: int, token_bytes: int) -> int:
    """Records per shuffle window when `shuffle_buffer` is not given: ~WINDOW_BYTES of token ids.

    Args:
        seq_len: the manifest's seq_len.
        token_bytes: bytes per token id (2 for uint16, 4 for int32).

    Returns:
        Records per window, within [MIN_WINDOW, MAX_WINDOW].
    """
    return int(min(MAX_WINDOW, max(MIN_WINDOW, WINDOW_BYTES // (max(1, seq_len) * token_bytes))))


def steps_for(total_records: int, batch_size: int, dp_size: int) -> int:
    """Batches per epoch on every rank: total_records // (batch_size * dp_size)."""
    if batch_size < 1 or dp_size < 1:
        raise ValueError(f"batch_size ({batch_size}) and dp_size ({dp_size}) must be >= 1")
    return int(total_records) // (batch_size * dp_size)


def shard_order(num_shards: int, seed: int | None, epoch: int, shuffle: bool) -> np.ndarray:
    """The epoch's shard order: a permutation of range(num_shards) from (seed, epoch), or identity.

    Args:
        num_shards: how many shards the manifest lists.
        seed: the base seed (required when shuffling).
        epoch: the epoch number.
        shuffle: False keeps the manifest's order.

    Returns:
        int64 array of shard indices.
    """
    if not shuffle:
        return np.arange(num_shards, dtype=np.int64)
    return keyed_permutation(fold64(_SHARD_ORDER_TAG, seed, epoch), num_shards)


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """What one rank reads in one epoch, from a resume point on.

    Attributes:
        steps: batches per epoch on every rank.
        start_step: the first batch this plan yields (0 unless resuming).
        segments: int64 [K, 3] (shard index, first record, end record) of the rank's whole slice, in
            stream order; records not in any rank's segments are this epoch's dropped tail.
        reads: int64 [R, 4] (lane, shard index, first record, record count): what each lane reads
            from the resume point on, lane by lane, in order.
        windows: int64 [G, 5] (lane, records, permutation key, records to drop, shard index) in
            the order the rank consumes them, from the resume point on; end-of-segment markers are
            entries of 0 records; only the first entry can have records to drop.
    """

    steps: int
    start_step: int
    segments: np.ndarray
    reads: np.ndarray
    windows: np.ndarray


def plan_epoch(
    counts,
    batch_size: int,
    *,
    dp_rank: int = 0,
    dp_size: int = 1,
    seed: int | None = None,
    epoch: int = 0,
    shuffle: bool = True,
    window: int = 2048,
    lanes: int = DEFAULT_PARALLEL_READS,
    start_step: int = 0,
) -> EpochPlan:
    """Plan one epoch of one rank (see the module docstring for the algorithm).

    Args:
        counts: records per shard, in manifest order.
        batch_size: per-rank batch size.
        dp_rank: this rank's data-parallel index.
        dp_size: number of data-parallel ranks.
        seed: base seed; required when `shuffle`.
        epoch: epoch number (changes the shard order and every window's permutation).
        shuffle: permute shards and the records of each window.
        window: records per window (the shuffle unit).
        lanes: shards read concurrently (lane of segment k is k % lanes).
        start_step: first batch to produce, in [0, steps].

    Returns:
        The plan.
    """
    if shuffle and seed is None:
        raise ValueError("shuffling needs a seed (pass seed=<int>, or shuffle=False)")
    counts = np.asarray(counts, dtype=np.int64)
    steps = steps_for(counts.sum(), batch_size, dp_size)
    if not 0 <= start_step <= steps:
        raise ValueError(f"start_step {start_step} outside [0, {steps}]")
    per_rank = steps * batch_size

    # 1-2: the epoch's stream and this rank's slice of it, as segments.
    order = shard_order(len(counts), seed, epoch, shuffle)
    sizes = counts[order]
    ends = np.cumsum(sizes)
    begins = ends - sizes
    lo, hi = dp_rank * per_rank, (dp_rank + 1) * per_rank
    first = np.clip(lo - begins, 0, sizes)
    end = np.clip(hi - begins, 0, sizes)
    keep = end > first
    segments = np.stack([order[keep], first[keep], end[keep]], axis=1).reshape(-1, 3)

    # 3: windows, in segment order, then in the rank's round-robin consumption order.
    seg_len = segments[:, 2] - segments[:, 1]
    per_seg = -(-seg_len // window) + 1  # windows per segment, plus its end-of-segment marker
    seg_lane = np.arange(len(segments), dtype=np.int64) % lanes
    w_seg = np.repeat(np.arange(len(segments)), per_seg)
    w_in_seg = np.arange(len(w_seg)) - np.repeat(np.cumsum(per_seg) - per_seg, per_seg)
    w_first = np.minimum(segments[w_seg, 1] + w_in_seg * window, segments[w_seg, 2])
    w_size = np.minimum(window, segments[w_seg, 2] - w_first)  # 0 for the marker
    w_lane = seg_lane[w_seg]
    w_round = np.zeros(len(w_seg), dtype=np.int64)  # position of the window within its lane
    for lane in range(lanes):
        mine = w_lane == lane
        w_round[mine] = np.arange(mine.sum())
    stream = np.lexsort((w_lane, w_round))  # round-major, then lane

    # 4: one permutation key per window, from (seed, epoch, dp_rank, window number).
    base = fold64(_WINDOW_TAG, seed or 0, epoch, dp_rank)
    keys = (mix64(np.uint64(base) ^ np.arange(len(stream), dtype=np.uint64)) >> np.uint64(1)).astype(np.int64)

    # Resume: the window holding record start_step * batch_size, and what is left of each lane.
    pos = start_step * batch_size
    done = np.cumsum(w_size[stream])
    q = int(np.searchsorted(done, pos, side="right"))
    drop = pos - (int(done[q - 1]) if q > 0 else 0)
    rest = stream[q:]
    windows = np.stack(
        [w_lane[rest], w_size[rest], keys[q:], np.zeros(len(rest), np.int64), segments[w_seg[rest], 0]],
        axis=1,
    ).reshape(-1, 5)
    if len(rest):
        windows[0, 3] = drop
    # Each lane's remaining windows are a suffix of its windows, and a segment's a suffix of the
    # segment's: one read per segment, from its first remaining window to its end, lane by lane (a
    # segment with only its marker left reads 0 records and yields the marker).
    left = np.sort(rest)  # window numbers increase with the segment
    seg_of = w_seg[left]
    starts = np.flatnonzero(np.r_[True, seg_of[1:] != seg_of[:-1]]) if len(left) else np.zeros(0, int)
    segs = seg_of[starts]
    reads = np.stack(
        [
            seg_lane[segs],
            segments[segs, 0],
            w_first[left[starts]],
            np.add.reduceat(w_size[left], starts) if len(left) else np.zeros(0, np.int64),
        ],
        axis=1,
    ).reshape(-1, 4)
    reads = reads[np.lexsort((segs, reads[:, 0]))].astype(np.int64)
    return EpochPlan(steps, start_step, segments, reads, windows)
