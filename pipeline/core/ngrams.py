"""Words, word n-grams and their 64-bit hashes: the shingles of near-dedup and the keys of decontamination.

A word is a maximal run of Unicode word characters (letters, digits, underscore) of the text after NFC
normalization and lower-casing, so punctuation, whitespace and case never make two texts differ.
Each distinct word is hashed once (blake2b, 8 bytes: stable across platforms and Python versions, unlike `hash()`); an
n-gram's hash folds its words' hashes in order with splitmix64's finalizer, vectorized over all
positions of a text at once:

    h(w_i .. w_i+n-1) = mix(... mix(mix(SEED ^ wh_i) ^ wh_i+1) ... ^ wh_i+n-1)

    >>> words("The cat, the HAT.")
    ['the', 'cat', 'the', 'hat']
    >>> grams = ngram_hashes(word_hashes(words("a b c a b c")), 3)
    >>> len(grams), bool(grams[0] == grams[3]), bool(grams[0] == grams[1])
    (4, True, False)
    >>> len(ngram_hashes(word_hashes(["too", "short"]), 3))  # shorter than n: the whole text is one n-gram
    1
    >>> exact_key("  Cafe" + chr(0x301) + chr(10) + " au   lait ") == exact_key("Caf" + chr(0xE9) + " au lait")
    True
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

import numpy as np

from pipeline.core.hashing import mix64

WORD = re.compile(r"\w+")
_SPACE = re.compile(r"\s+")
_SEED = np.uint64(0x6A09E667F3BCC908)
# Exact dedup's normalizations: what two texts may differ by and still count as one.
NORMALIZATIONS = ("none", "nfc", "nfc_whitespace")
_CACHE_LIMIT = 1 << 20  # distinct words remembered per process (~100 MB at most)
_word_cache: dict[str, int] = {}


def normalize(text: str, normalization: str = "nfc_whitespace") -> str:
    """The text exact dedup compares: as is, NFC, or NFC with whitespace runs collapsed to one space and stripped."""
    if normalization == "none":
        return text
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}, not {normalization!r}")
    text = unicodedata.normalize("NFC", text)
    return _SPACE.sub(" ", text).strip() if normalization == "nfc_whitespace" else text


def exact_key(text: str, normalization: str = "nfc_whitespace") -> bytes:
    """blake2b-128 of the normalized text's UTF-8: a collision among 2^40 documents has odds ~2^-48."""
    return hashlib.blake2b(normalize(text, normalization).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def words(text: str) -> list[str]:
    """The text's words: NFC, lower-cased, runs of word characters."""
    return WORD.findall(unicodedata.normalize("NFC", text).lower())


def word_spans(text: str) -> tuple[list[str], np.ndarray]:
    """The words of `text` (as `words`, but without NFC, so that offsets stay the text's) and their (start, end)."""
    found = [(m.group().lower(), m.start(), m.end()) for m in WORD.finditer(text)]
    spans = np.array([(s, e) for _, s, e in found], np.int64).reshape(-1, 2)
    return [w for w, _, _ in found], spans


def word_hashes(tokens: list[str]) -> np.ndarray:
    """uint64 hash of each word (each distinct word hashed once per process, then looked up)."""
    cache = _word_cache
    missing = [w for w in set(tokens) if w not in cache]
    if len(cache) + len(missing) > _CACHE_LIMIT:
        cache.clear()
    for w in missing:
        cache[w] = int.from_bytes(hashlib.blake2b(w.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
    return np.fromiter(map(cache.__getitem__, tokens), np.uint64, len(tokens))


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of each n-gram of consecutive words (one for a text of 1..n-1 words, none for no words)."""
    if n < 1:
        raise ValueError("n-gram size must be >= 1")
    count = len(hashes) - n + 1
    if len(hashes) == 0:
        return np.empty(0, np.uint64)
    if count < 1:
        hashes, count, n = hashes, 1, len(hashes)
    h = np.full(count, _SEED, np.uint64)
    for k in range(n):
        h = mix64(h ^ hashes[k : k + count])
    return h


def shingles(text: str, n: int) -> np.ndarray:
    """The text's distinct word n-gram hashes, sorted (uint64)."""
    return np.unique(ngram_hashes(word_hashes(words(text)), n))
