"""Words, word n-grams and their 64-bit hashes: the shingles of near-dedup and the keys of decontamination.

A word is a maximal run of Unicode word characters (letters, digits, underscore) of the text after NFC
normalization and lower-casing, so punctuation, whitespace and case never make two texts differ.
Two word hashes, both stable across platforms and Python versions (unlike `hash()`):

- `word_hashes(words)`: blake2b (8 bytes) of each distinct word, once per process, then looked up;
  decontamination's, which also needs the words themselves (the evidence it records).
- `text_word_hashes(text)`: near dedup's, the same words found and hashed in numpy over the text's
  code points, with no Python object per word (the per-word objects are most of the cost): a word's hash is
  mix64(len ^ sum_j v(c_j) * B^j mod 2^64), v(c) = mix64(c ^ KEY) for its code points c_j.
  A polynomial hash mod 2^64 has known colliding pairs (Thue-Morse words of 2^11+ letters): such a
  pair makes the shingles that differ only in those two words equal, nothing more.

An n-gram's hash folds its words' hashes in order with splitmix64's finalizer, vectorized over all
positions of a text at once:

    h(w_i .. w_i+n-1) = mix(... mix(mix(SEED ^ wh_i) ^ wh_i+1) ... ^ wh_i+n-1)

    >>> words("The cat, the HAT.")
    ['the', 'cat', 'the', 'hat']
    >>> grams = ngram_hashes(word_hashes(words("a b c a b c")), 3)
    >>> len(grams), bool(grams[0] == grams[3]), bool(grams[0] == grams[1])
    (4, True, False)
    >>> len(ngram_hashes(word_hashes(["too", "short"]), 3))  # shorter than n: the whole text is one n-gram
    1
    >>> bool((text_word_hashes("Cat cat, CAT!") == text_word_hashes("cat")[0]).all()), len(text_word_hashes(" ,. "))
    (True, 0)
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
SEED = np.uint64(0x6A09E667F3BCC908)  # an n-gram's fold starts here
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
    # str.split() splits at the characters `\s` matches (both Py_UNICODE_ISSPACE), faster than re.sub.
    return " ".join(text.split()) if normalization == "nfc_whitespace" else text


def exact_key(text: str, normalization: str = "nfc_whitespace") -> bytes:
    """blake2b-128 of the normalized text's UTF-8: a collision among 2^40 documents has odds ~2^-48."""
    return blake2b_key(normalize(text, normalization).encode("utf-8", "surrogatepass"))


def blake2b_key(data) -> bytes:
    """Exact dedup's key of the normalized text's UTF-8 bytes (any buffer): blake2b, 16 bytes."""
    return hashlib.blake2b(data, digest_size=16).digest()


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


CHAR_KEY = np.uint64(0x3C6EF372FE94F82B)
BASE = np.uint64(0x9E3779B97F4A7C15)  # odd: its powers never vanish mod 2^64
_tables: dict[str, np.ndarray] = {}


def word_chars() -> np.ndarray:
    """Whether WORD matches each code point (0..0x10FFFF), as bools; built once per process."""
    table = _tables.get("word")
    if table is None:
        every = np.arange(0x110000, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
        table = np.zeros(0x110000, bool)
        for m in WORD.finditer(every):
            table[m.start() : m.end()] = True
        _tables["word"] = table
    return table


def _powers(n: int) -> np.ndarray:
    """B^0 .. B^(n-1) mod 2^64 (grown as needed, kept per process)."""
    powers = _tables.get("powers")
    if powers is None or len(powers) < n:
        size = max(n, 1024, 2 * (0 if powers is None else len(powers)))
        powers = np.empty(size, np.uint64)
        powers[0] = 1
        with np.errstate(over="ignore"):
            powers[1:] = BASE
            powers = np.cumprod(powers, dtype=np.uint64)  # wraps mod 2^64, as intended
        _tables["powers"] = powers
    return powers[:n]


def text_word_hashes(text: str) -> np.ndarray:
    """uint64 hash of each word of `text` (the words of `words(text)`, in order), computed in numpy."""
    text = unicodedata.normalize("NFC", text).lower()
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    inside = word_chars()[points]
    idx = np.flatnonzero(inside)
    if len(idx) == 0:
        return np.empty(0, np.uint64)
    starts = np.ones(len(idx), bool)  # a word starts where the previous character was not a word char
    starts[1:] = idx[1:] != idx[:-1] + 1
    first = np.flatnonzero(starts)  # each word's first position in idx
    lengths = np.diff(np.append(first, len(idx)))
    word_of = np.cumsum(starts) - 1
    within = np.arange(len(idx)) - first[word_of]
    with np.errstate(over="ignore"):
        terms = mix64(points[idx].astype(np.uint64) ^ CHAR_KEY) * _powers(int(lengths.max()))[within]
        sums = np.add.reduceat(terms, first)
    return mix64(sums ^ lengths.astype(np.uint64))


def word_hash(word: str) -> int:
    """`text_word_hashes`' hash of one word (already NFC and lower-cased), in plain Python: its definition."""
    m = (1 << 64) - 1
    total = 0
    for j, c in enumerate(word):
        total = (total + int(mix64(np.uint64(ord(c)) ^ CHAR_KEY)) * pow(int(BASE), j, 1 << 64)) & m
    return int(mix64(np.uint64(total ^ len(word))))


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of each n-gram of consecutive words (one for a text of 1..n-1 words, none for no words)."""
    if n < 1:
        raise ValueError("n-gram size must be >= 1")
    count = len(hashes) - n + 1
    if len(hashes) == 0:
        return np.empty(0, np.uint64)
    if count < 1:
        hashes, count, n = hashes, 1, len(hashes)
    h = np.full(count, SEED, np.uint64)
    for k in range(n):
        h = mix64(h ^ hashes[k : k + count])
    return h


def shingles(text: str, n: int) -> np.ndarray:
    """The text's distinct word n-gram hashes (of `text_word_hashes`), sorted (uint64)."""
    return np.unique(ngram_hashes(text_word_hashes(text), n))
