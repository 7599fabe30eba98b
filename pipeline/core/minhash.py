"""MinHash signatures of shingle sets, LSH banding, and the S-curve that sets the bands.

Signature: for each of `num_perm` hash functions h_i(x) = a_i * x + b_i mod 2^64 (a_i odd: a
bijection of 64-bit words, so every h_i permutes the shingle hashes, which are already well mixed),
the minimum over the document's shingles; two documents' signatures agree in position i with
probability equal to their Jaccard similarity J. Computed as one (shingles x num_perm) numpy block
at a time (`BLOCK` shingles), so a 6 MB document needs no more memory than a short one. Only the
upper 32 bits are kept (uint32), as datasketch and datatrove do: agreement by chance is 2^-32.

Banding: the first bands*rows values, cut into `bands` bands of `rows`; documents whose values
agree on a whole band collide in that band's bucket. A pair of Jaccard J collides in some band with
probability P(J) = 1 - (1 - J^rows)^bands: the S-curve. The defaults follow MinHash LSH at a 0.87
threshold as in Pythia's deduplicated Pile (datasketch's MinHashLSH, 128 permutations): datasketch's
choice of (bands, rows) minimizing the false positive area below 0.87 plus the false negative area
above it is 7 bands of 18 rows:

    >>> round(float(collision_probability(0.87, 7, 18)), 3), optimal_bands(0.87, 128)
    (0.449, (7, 18))
    >>> [round(float(collision_probability(s, 7, 18)), 3) for s in (0.7, 0.8, 0.9, 0.95)]
    [0.011, 0.119, 0.68, 0.971]
    >>> hasher = MinHasher(num_perm=16, seed=1)
    >>> a, b = hasher.signature(np.arange(100, dtype=np.uint64)), hasher.signature(np.arange(100, dtype=np.uint64))
    >>> bool((a == b).all()), estimate_jaccard(a, hasher.signature(np.arange(50, 150, dtype=np.uint64))) < 1
    (True, True)
    >>> jaccard(np.array([1, 2, 3], np.uint64), np.array([2, 3, 4], np.uint64))
    0.5
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from pipeline.core.hashing import mix64, stable_hash

BLOCK = 2048  # shingles per numpy block: BLOCK * num_perm * 8 bytes (2 MiB at 128 permutations)
EMPTY = np.uint32(0xFFFFFFFF)  # a signature value of a document without shingles


def collision_probability(similarity, bands: int, rows: int):
    """P(a pair of Jaccard `similarity` shares at least one band): 1 - (1 - s^rows)^bands."""
    s = np.asarray(similarity, dtype=np.float64)
    return 1.0 - (1.0 - s**rows) ** bands


def _area(bands: int, rows: int, lo: float, hi: float, false_negative: bool) -> float:
    x = np.linspace(lo, hi, 1001)
    y = collision_probability(x, bands, rows)
    y = 1.0 - y if false_negative else y
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


def optimal_bands(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows), bands*rows <= num_perm, minimizing the weighted false positive + negative areas (datasketch's)."""
    best, best_error = (1, 1), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            error = (fp_weight * _area(bands, rows, 0.0, threshold, False)
                     + fn_weight * _area(bands, rows, threshold, 1.0, True))
            if error < best_error:
                best, best_error = (bands, rows), error
    return best


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|a & b| / |a | b| of two sorted arrays of distinct shingle hashes (1.0 for two empty sets)."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    common = len(np.intersect1d(a, b, assume_unique=True))
    return common / (len(a) + len(b) - common)


def estimate_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The share of equal positions of two signatures: MinHash's estimate of the Jaccard similarity."""
    return float(np.mean(a == b))


@dataclasses.dataclass(frozen=True)
class MinHasher:
    """`num_perm` keyed hash functions derived from `seed`: the same seed gives the same signatures everywhere."""

    num_perm: int = 128
    seed: int = 1

    def __post_init__(self):
        if self.num_perm < 1:
            raise ValueError("num_perm must be >= 1")

    @property
    def keys(self) -> np.ndarray:
        """(2, num_perm) uint64: each hash function's odd multiplier a_i and offset b_i."""
        base = np.uint64(stable_hash("minhash", self.seed))
        words = mix64(base ^ mix64(np.arange(2 * self.num_perm, dtype=np.uint64))).reshape(2, self.num_perm)
        words[0] |= np.uint64(1)
        return words

    def signature(self, shingles: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
        """uint32 signature (num_perm values) of a set of uint64 shingle hashes; all EMPTY for no shingles."""
        keys = self.keys if keys is None else keys
        out = np.full(self.num_perm, np.iinfo(np.uint64).max, np.uint64)
        shingles = np.asarray(shingles, np.uint64)
        a, b = keys
        block = np.empty((min(BLOCK, len(shingles)), self.num_perm), np.uint64)
        with np.errstate(over="ignore"):
            for start in range(0, len(shingles), BLOCK):
                part = shingles[start : start + BLOCK, None]
                rows = block[: len(part)]
                np.multiply(part, a, out=rows)  # wraps mod 2^64, as intended
                np.add(rows, b, out=rows)
                np.minimum(out, rows.min(axis=0), out=out)
        return (out >> np.uint64(32)).astype(np.uint32)


def band_keys(signature: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 bucket key of each band of a signature, the band's index folded in (so bands never share buckets).

    blake2b-64 of the band's index and values: one C call per band (a document's few bands cost a
    microsecond each, where numpy's per-call overhead would dominate), and two bands collide only by
    chance (2^-64), so a bucket holds only documents that agree on a whole band.
    """
    return np.array(band_key_ints(signature, bands, rows), np.int64).view(np.uint64)


def band_key_ints(signature: np.ndarray, bands: int, rows: int) -> list[int]:
    """`band_keys` as Python ints read as signed 64-bit words: the same keys, in the form a shuffle encodes fastest.

    (Beam writes an int in [-2^63, 2^63) as a varint, and pickles a larger one.)
    """
    if bands * rows > len(signature):
        raise ValueError(f"bands * rows = {bands * rows} exceeds the signature's {len(signature)} values")
    raw = np.ascontiguousarray(signature[: bands * rows], dtype="<u4").tobytes()
    width = 4 * rows
    blake = hashlib.blake2b
    return [int.from_bytes(blake(raw[k * width : (k + 1) * width], digest_size=8, person=b"band%d" % k).digest(),
                           "little", signed=True) for k in range(bands)]
