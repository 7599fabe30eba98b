"""An input's content digest, computed while it is read: each line hashed with its number, the terms summed.

The manifest records each input's line count and decompressed size; an edit that keeps both (a
word replaced by another of the same length) changes neither. The digest catches it: every line
contributes xxh3-128 of its bytes, seeded with its line number (a line over --max_line_mb, of
which only the first bytes are held: those bytes and its full length), and the terms are added
modulo 2**128. A sum does not depend on how the file was cut into chunks, which worker read which
chunk or in what order the counts were merged, so the job adds it up with its other counts
(pipeline/core/stats.py) and `removed` recomputes it from the lines alone
(pipeline/inspect/readback.py). The line number in the seed makes a moved line a change too.

    >>> total = lines_term([(1, b"a", 0), (2, b"b", 0)])
    >>> total == (lines_term([(2, b"b", 0)]) + lines_term([(1, b"a", 0)])) % MOD
    True
    >>> total == lines_term([(1, b"b", 0), (2, b"a", 0)])
    False
    >>> len(digest_hex(total))
    32
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

MOD = 1 << 128


def _hash():
    # Imported when a digest is made (the job, `removed`), not by the readers that import core/ alone.
    import xxhash

    return xxhash.xxh3_128_intdigest


def line_term(number: int, data: bytes, oversized: int = 0, hash_=None) -> int:
    """One line's term: its bytes (and, when only its start is held, its full length) seeded with its number."""
    if oversized:
        data = bytes(data) + struct.pack("<Q", oversized)
    return (hash_ or _hash())(data, seed=number)


def lines_term(lines: Iterable) -> int:
    """The sum of the lines' terms, modulo 2**128: `Line`s (pipeline/core/documents.py) or (number, data, oversized)."""
    hash_, total = _hash(), 0
    for line in lines:
        number, data, oversized = (line.number, line.data, line.oversized) if hasattr(line, "number") else line
        total += line_term(number, data, oversized, hash_)
    return total % MOD


def digest_hex(total: int) -> str:
    """A summed digest as the manifest shows it: 32 hex digits."""
    return f"{int(total) % MOD:032x}"


def limbs(total: int) -> dict[str, int]:
    """A digest as four 32-bit parts, each summed apart ({"0": ..., "3": ...}), which give the sum back.

    Every count the job merges stays a 64-bit integer: Beam encodes those without pickling.

    >>> from_limbs({k: a + b for (k, a), b in zip(limbs(MOD - 1).items(), limbs(5).values())}) == 4
    True
    """
    total %= MOD
    return {str(i): (total >> (32 * i)) & 0xFFFFFFFF for i in range(4)}


def from_limbs(parts: dict) -> int:
    """The digest (modulo 2**128) of parts summed as `limbs` gives them."""
    return sum(int(value) << (32 * int(i)) for i, value in parts.items()) % MOD
