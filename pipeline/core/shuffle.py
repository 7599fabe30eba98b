"""A global shuffle that is the same on every run: a keyed permutation of record indices.

Every record has a global index (its source's offset plus its index in the source, sources in
sorted order). `Permutation(n, seed)` maps [0, n) onto itself bijectively with a 4-round Feistel
network on the next even number of bits and cycle walking, vectorized over numpy arrays. A
record's permuted position decides its shard and its place inside the shard, so shards are
exactly balanced and their content does not depend on how the work was split among workers.

    >>> p = Permutation(10, seed=0)
    >>> sorted(p(np.arange(10)).tolist()) == list(range(10))
    True
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.core.hashing import mix64, stable_hash

_ROUNDS = 4


class Permutation:
    """A keyed bijection of [0, n), vectorized."""

    def __init__(self, n: int, seed: int):
        if n < 0:
            raise ValueError("n must be >= 0")
        self.n = n
        bits = max(2, int(n - 1).bit_length() if n > 1 else 2)
        bits += bits % 2
        self._half = bits // 2
        self._mask = np.uint64((1 << self._half) - 1)
        self._keys = [np.uint64(k) for k in stable_hash("shuffle", seed, words=_ROUNDS)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left = x >> np.uint64(self._half)
        right = x & self._mask
        with np.errstate(over="ignore"):
            for key in self._keys:
                left, right = right, left ^ (mix64(right ^ key) & self._mask)
        return (left << np.uint64(self._half)) | right

    def _decrypt(self, y: np.ndarray) -> np.ndarray:
        left = y >> np.uint64(self._half)
        right = y & self._mask
        with np.errstate(over="ignore"):
            for key in reversed(self._keys):
                left, right = right ^ (mix64(left ^ key) & self._mask), left
        return (left << np.uint64(self._half)) | right

    def __call__(self, index: np.ndarray) -> np.ndarray:
        """Permuted positions of the given indices (each in [0, n))."""
        x = np.asarray(index, np.uint64)
        if x.size and int(x.max()) >= self.n:
            raise ValueError(f"index out of range [0, {self.n})")
        y = self._encrypt(x)
        # Cycle walking: re-encrypt the values that fell outside [0, n) until all are inside.
        outside = y >= np.uint64(self.n)
        while outside.any():
            y[outside] = self._encrypt(y[outside])
            outside = y >= np.uint64(self.n)
        return y.astype(np.int64)

    def inverse(self, position: np.ndarray) -> np.ndarray:
        """The indices whose permuted positions these are (each in [0, n)): `p.inverse(p(i)) == i`."""
        y = np.asarray(position, np.uint64)
        if y.size and int(y.max()) >= self.n:
            raise ValueError(f"position out of range [0, {self.n})")
        x = self._decrypt(y)
        # Cycle walking backwards: the first value inside [0, n) is the preimage.
        outside = x >= np.uint64(self.n)
        while outside.any():
            x[outside] = self._decrypt(x[outside])
            outside = x >= np.uint64(self.n)
        return x.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How `num_records` equal-size records are spread over shards of at most `shard_bytes`.

    Shard i holds the records whose permuted position is in [bounds[i], bounds[i+1]); shard sizes
    differ by at most one record.
    """

    num_records: int
    num_shards: int

    @classmethod
    def for_size(cls, num_records: int, record_bytes: int, shard_bytes: int) -> ShardPlan:
        """Fewest shards such that none exceeds `shard_bytes` (a record larger still gets one)."""
        per_shard = max(1, shard_bytes // max(1, record_bytes))
        return cls(num_records, -(-num_records // per_shard) if num_records else 0)

    def bounds(self) -> np.ndarray:
        """Start position of every shard, plus the end."""
        return (np.arange(self.num_shards + 1) * self.num_records) // max(1, self.num_shards)

    def shard_of(self, positions: np.ndarray) -> np.ndarray:
        """Shard index for each permuted position."""
        return np.searchsorted(self.bounds(), positions, side="right") - 1

