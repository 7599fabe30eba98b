"""Per-subset epochs: how many copies of a document go into the output.

A subset with 2.5 epochs gives every document 2 copies plus a third with probability 0.5. The
draw is a hash of (seed, file, line), so the same documents get the extra copy on every run and
every worker. Epoch copies are packed as separate streams, so repeats of a document land in
different records (and, after the global shuffle, far apart).

    >>> copies_of(2.0, seed=0, file_index=0, line=1)
    2
"""

from __future__ import annotations

import math

from pipeline.core.hashing import unit_interval


def copies_of(epochs: float, seed: int, file_index: int, line: int) -> int:
    """floor(epochs), plus one more with probability frac(epochs), decided by (seed, file, line)."""
    whole = math.floor(epochs)
    frac = epochs - whole
    if frac <= 0:
        return whole
    return whole + (unit_interval(seed, file_index, line) < frac)
