"""Best fit decreasing's loop compiled by numba: `best_fit.assign_sequences`'s decisions, for less CPU.

`best_fit.assign_sequences` places the items of at most half a sequence one at a time in Python
(bisect over the open sequences' keys); that loop stays the definition and runs where numba is not
installed. Every rank of a read-time-packed store packs every window of the order (it needs their
sequence counts to know where its own sequences are), so this loop's cost per rank grows with the
number of ranks; compiled, it is a small share of a rank's work at any number of ranks.

The kernel keeps the same keys (room << 32 | sequence) in one sorted array: the first key >= the
item's is its sequence; that key, less the item, moves down to its new place (or leaves when the
sequence is full); a new sequence's key goes last (it has the most room, `assign_sequences`).
`@njit(nogil=True, cache=True)`: compiled once, cached beside this module (or in numba's user-wide
cache), only loaded by later processes. Importing numba and loading the kernel costs a process
about as much CPU as the Python loop spends on `WARM_ITEMS` items, so the loop places the
process's first `WARM_ITEMS` (a reader's first batch does not wait for numba) and the kernel the
rest: never more than twice the better choice's CPU. `tests/test_best_fit.py` checks both equal.
"""

from __future__ import annotations

import numpy as np

BIN_BITS = 32  # a sequence's room and its index share one sorted integer key
MIN_ITEMS = 64  # below this the Python loop is as quick as a call into the kernel
WARM_ITEMS = 1 << 20  # items the Python loop places in a process before numba is loaded

_kernel: list = []  # [compiled function or None], once tried
_declined = [0]  # items declined so far in this process


def _compile():
    try:
        import numba
    except ImportError:  # no numba for this Python or platform: the Python loop
        return None

    @numba.njit(nogil=True, cache=True)
    def bisect_left(keys, hi, value):  # pragma: no cover -- compiled
        lo = 0
        while lo < hi:
            mid = (lo + hi) >> 1
            if keys[mid] < value:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @numba.njit(nogil=True, cache=True)
    def place(keys, count, sizes, seq_len, opened, out):  # pragma: no cover -- compiled
        mask = (1 << 32) - 1
        for t in range(len(sizes)):
            size = sizes[t] << 32
            j = bisect_left(keys, count, size)
            if j == count:
                b = opened
                opened += 1
                keys[count] = ((seq_len << 32) - size) | b
                count += 1
            else:
                key = keys[j]
                b = key & mask
                new = key - size
                if new > mask:  # room left: its key moves down to its place among keys[:j]
                    lo = bisect_left(keys, j, new)
                    for q in range(j, lo, -1):
                        keys[q] = keys[q - 1]
                    keys[lo] = new
                else:  # full: its key leaves
                    for q in range(j, count - 1):
                        keys[q] = keys[q + 1]
                    count -= 1
            out[t] = b
        return opened

    return place


def place_items(keys: list[int], sizes: np.ndarray, seq_len: int, opened: int) -> tuple[np.ndarray, int] | None:
    """The sequence of each item (sizes in decreasing order, each <= seq_len / 2) and the sequences opened.

    `keys`: the open sequences' sorted keys; `opened`: sequences opened so far. None (the caller's
    loop places them) where numba is not installed or before the process's first `WARM_ITEMS` items.
    """
    if not _kernel and _declined[0] < WARM_ITEMS:
        _declined[0] += len(sizes)
        return None
    if not _kernel:
        _kernel.append(_compile())
    place = _kernel[0]
    if place is None:
        return None
    buffer = np.empty(len(keys) + len(sizes), np.int64)
    buffer[: len(keys)] = keys
    out = np.empty(len(sizes), np.int64)
    opened = place(buffer, len(keys), np.ascontiguousarray(sizes, np.int64), int(seq_len), int(opened), out)
    return out, int(opened)
