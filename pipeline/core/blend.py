"""A deterministic blend of weighted sources: which source each sample of a mixture comes from.

The guarantee (the "quota" property): with weights w (normalized), after any n samples of a
segment of constant weights, source d has given c_d(n) samples with ``|c_d(n) - n * w_d| < 1``,
for every n and every d, whatever the number of sources and however extreme the weights. No random
draw: the sequence is a function of the weights alone, and of where the segment resumes.

How: source d's j-th sample (j = 1, 2, ...) may only come at a position n (1-based) inside
``[release, deadline] = [floor((j - 1) / w_d) + 1, ceil(j / w_d)]``: before the release the count
would exceed ``n * w_d + 1``, after the deadline it would fall below ``n * w_d - 1``. A sequence
meeting every window exists (Tijdeman 1980, "the chairman assignment problem": its discrepancy is
at most ``1 - 1/(2k - 2)`` for k sources), and for unit jobs with integer windows the
earliest-deadline-first rule finds one: at each position take, among the sources whose next sample
is released, the one whose next deadline comes first (ties: the lower source index). Megatron's
`BlendedDataset` takes the largest "sampling error" ``n * w_d - c_d`` instead, which has no such
bound (one weight of 0.999 and 21 of 0.001/21: a count 1.9 away from n x w within 30,000 samples).
The arithmetic is exact: weights become integers over a common denominator.

The state of a blend is its position and its counts: `blend(weights, m, start, counts)` continues a
segment exactly, so a resume needs only (start, counts), never a replay from the beginning.

Worked example: weights 1:2 (w = 1/3, 2/3). Source 0's first sample has the window [1, 3]; source
1's first [1, 2], its second [2, 3]. Position 1: source 1 (deadline 2 before 3). Position 2: both
next samples are due by 3, a tie: source 0. Position 3: source 1. Then the pattern repeats.

    >>> blend([1, 2], 6).tolist()
    [1, 0, 1, 1, 0, 1]
    >>> blend([1, 2], 3, start=3, counts=[1, 2]).tolist()   # the same sequence, resumed at 3
    [1, 0, 1]
    >>> counts_after(blend([0.001, 0.999], 2000), 2)[-1].tolist()
    [2, 1998]
"""

from __future__ import annotations

import heapq
import math
from fractions import Fraction

import numpy as np

EXACT_DENOMINATOR = 10**15  # weights whose common denominator is larger are rounded to 1/QUANTUM
QUANTUM = 1 << 48


def integer_weights(weights) -> tuple[list[int], int]:
    """Weights as integers p_d over their sum q.

    Exact when the weights' common denominator is at most 10**15 (a float is read as the decimal it
    prints as: 0.001 is 1/1000); otherwise each is rounded to a multiple of 2**-48 of the total (the
    counts then stay within 1 of n x the weights as given for the first 2**47 samples).

    Raises:
        ValueError: a negative, non-finite or all-zero weight.
    """
    fracs = []
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, int | float | Fraction) or not math.isfinite(w) or w < 0:
            raise ValueError(f"weight {w!r}: weights must be finite numbers >= 0")
        fracs.append(Fraction(w) if isinstance(w, int | Fraction) else Fraction(repr(float(w))))
    if not fracs or sum(fracs) == 0:
        raise ValueError(f"weights {list(weights)!r}: at least one must be > 0")
    denominator = math.lcm(*(f.denominator for f in fracs))
    if denominator > EXACT_DENOMINATOR:  # weights with many digits: rounded to 2**-48 of the total
        total = sum(fracs)
        ints = [int(f * QUANTUM / total) for f in fracs]
        by_remainder = sorted(range(len(fracs)), key=lambda d: ints[d] - fracs[d] * QUANTUM / total)
        for d in by_remainder[: QUANTUM - sum(ints)]:
            ints[d] += 1
    else:
        ints = [int(f * denominator) for f in fracs]
    g = math.gcd(*ints)
    ints = [p // g for p in ints]
    return ints, sum(ints)


def _window(j: int, p: int, q: int) -> tuple[int, int]:
    # Sample j (1-based) of a source of weight p/q: positions [floor((j-1) q / p) + 1, ceil(j q / p)].
    return (j - 1) * q // p + 1, -(-j * q // p)


def blend(weights, m: int, start: int = 0, counts=None) -> np.ndarray:
    """The sources of positions [start, start + m) of a segment (int64 [m]).

    Args:
        weights: one weight per source (any scale; zeros take nothing).
        m: how many positions.
        start: positions of the segment already taken.
        counts: samples each source gave in those positions (zeros when start == 0).

    Returns:
        The source index of each position.
    """
    p, q = integer_weights(weights)
    counts = [0] * len(p) if counts is None else [int(c) for c in counts]
    if len(counts) != len(p) or sum(counts) != start or start < 0 or m < 0:
        raise ValueError(f"counts {counts} do not add up to start {start} for {len(p)} sources")
    waiting, ready = [], []  # heaps of (release, source) and (deadline, source)
    for d, pd in enumerate(p):
        if pd:
            release, deadline = _window(counts[d] + 1, pd, q)
            heapq.heappush(waiting, (release, d, deadline))
    out = np.empty(m, np.int64)
    for i in range(m):
        n = start + i + 1  # 1-based position
        while waiting and waiting[0][0] <= n:
            _, d, deadline = heapq.heappop(waiting)
            heapq.heappush(ready, (deadline, d))
        deadline, d = heapq.heappop(ready)
        if deadline < n:  # cannot happen (see the module docstring); never return a wrong order
            raise RuntimeError(f"blend: source {d} missed its deadline {deadline} at position {n}")
        out[i] = d
        counts[d] += 1
        release, deadline = _window(counts[d] + 1, p[d], q)
        heapq.heappush(waiting, (release, d, deadline))
    return out


def counts_after(sources: np.ndarray, k: int, initial=None) -> np.ndarray:
    """Cumulative counts: row n is each source's samples among the first n + 1 positions (int64 [m, k])."""
    onehot = np.zeros((len(sources), k), np.int64)
    onehot[np.arange(len(sources)), np.asarray(sources, np.int64)] = 1
    out = np.cumsum(onehot, axis=0)
    return out if initial is None else out + np.asarray(initial, np.int64)[None, :]


def segment_of(schedule_steps, step: int) -> int:
    """Index of the schedule segment holding global step `step` (steps: sorted, the first is 0)."""
    return int(np.searchsorted(np.asarray(schedule_steps, np.int64), step, side="right")) - 1
