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

from pipeline.core.hashing import mix64_into, stable_hash

_ROUNDS = 4
# Values encrypted together: their few work arrays stay in a core's cache, and no pass of cycle
# walking waits for the slowest value of the whole input.
_BLOCK = 1 << 15


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

    def _feistel(self, x: np.ndarray, backwards: bool) -> None:
        """Encrypt (or, backwards, decrypt) `x`, a uint64 block, in place.

        Decryption is encryption with the keys reversed and the halves swapped.
        """
        half, mask = np.uint64(self._half), self._mask
        high, low = x >> half, x & mask
        left, right = (low, high) if backwards else (high, low)
        out, scratch = np.empty_like(x), np.empty_like(x)
        for key in reversed(self._keys) if backwards else self._keys:
            np.bitwise_xor(right, key, out=out)
            mix64_into(out, out, scratch)
            np.bitwise_and(out, mask, out=out)
            np.bitwise_xor(left, out, out=left)
            left, right = right, left
        high, low = (right, left) if backwards else (left, right)
        np.left_shift(high, half, out=x)
        np.bitwise_or(x, low, out=x)

    def _walk(self, values, backwards: bool, what: str) -> np.ndarray:
        """Each value through the network (`backwards`: its inverse) until it lands in [0, n).

        Cycle walking, a block of values at a time.
        """
        x = np.asarray(values, np.uint64)
        if x.size and int(x.max()) >= self.n:
            raise ValueError(f"{what} out of range [0, {self.n})")
        flat = x.reshape(-1)
        out = np.empty(len(flat), np.int64)
        n = np.uint64(self.n)
        for lo in range(0, len(flat), _BLOCK):
            y = flat[lo : lo + _BLOCK].copy()
            self._feistel(y, backwards)
            outside = np.flatnonzero(y >= n)
            while len(outside):
                z = y[outside]
                self._feistel(z, backwards)
                y[outside] = z
                outside = outside[z >= n]
            out[lo : lo + len(y)] = y
        return out.reshape(x.shape)

    def __call__(self, index: np.ndarray) -> np.ndarray:
        """Permuted positions of the given indices (each in [0, n))."""
        return self._walk(index, False, "index")

    def inverse(self, position: np.ndarray) -> np.ndarray:
        """The indices whose permuted positions these are (each in [0, n)): `p.inverse(p(i)) == i`.

        Walking backwards, the first value inside [0, n) is the preimage.
        """
        return self._walk(position, True, "position")


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

