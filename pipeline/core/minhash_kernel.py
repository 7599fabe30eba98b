"""Near dedup's signatures and exact dedup's key in compiled loops: the numpy definitions' values, for less CPU.

The definitions are `ngrams.text_word_hashes`, `ngrams.ngram_hashes`, `minhash.MinHasher.signature`
and `ngrams.exact_key`; they stay the reference. The kernels below give the same values:

- words: one pass over the code points of the NFC text (an ASCII text's own bytes, which are
  its NFC, else its UTF-32), each lower-cased through a
  table of `str.lower()` per code point, each run of word characters (`ngrams.word_chars()`)
  hashed as sum_j mix64(c_j ^ KEY) * B^j mod 2^64, then mix64(sum ^ length): no index arrays, no
  powers table, no lower-cased copy of the text. `str.lower()` is per code point but for two: İ
  (U+0130, two code points lower-cased) and Σ (U+03A3, final sigma depends on its neighbours); a
  text with either is lower-cased by `str.lower()` itself;
- n-grams: each folded from its words' hashes with splitmix64's finalizer, from the same seed;
- signature: for each n-gram x the `num_perm` values a_i x + b_i mod 2^64, their running minima
  in registers, the upper 32 bits kept: no (shingles x num_perm) block in memory;
- exact key (`nfc_whitespace`): the NFC text's whitespace runs (the characters `str.split()` splits
  at) collapsed to one space and stripped, encoded as UTF-8 in the same pass (a lone surrogate as
  Python's "surrogatepass" writes it: three bytes); blake2b-128 of those bytes stays hashlib's.
  The text is NFC-normalized once for both keys.

Why numba: a maintained JIT compiler for numeric Python loops (NumFOCUS; wheels for CPython 3.10
to 3.14 on Linux, macOS and Windows), so there is no build step of ours and no C extension to
ship per platform; the kernels are plain Python that a reader can check against the definitions.
`@njit(nogil=True, cache=True)`: the machine code is compiled once and cached beside this module
(or in numba's user-wide cache when that is read-only), and only loaded, not compiled, by each worker.
Where numba is not installed (a Python version or platform it has no wheel for yet), `Signer`
computes the same values with the numpy definitions. `tests/test_minhash_kernel.py` checks both
paths equal on real text and fuzzed text (combining marks, İ, ß, final sigma, lone surrogates,
astral characters, texts of no, one and fewer than n words). Measured CPU seconds per MB in
docs/dedup.md ("Why numba for the signatures").

    >>> signer = Signer("nfc_whitespace", 5, 16, seed=1)
    >>> key, grams, sig = signer.sign("The cat sat on the mat, the cat sat.")
    >>> key == ngrams.exact_key("The cat sat on the mat, the cat sat."), len(grams), sig.dtype.name
    (True, 5, 'uint32')
    >>> reference = Signer("nfc_whitespace", 5, 16, seed=1, compiled=False).sign("The cat sat on the mat, the cat sat.")
    >>> bool((sig == reference[2]).all()) and bool((grams == reference[1]).all())
    True
"""

from __future__ import annotations

import logging
import re
import unicodedata

import numpy as np

from pipeline.core import minhash, ngrams

try:
    import numba
except ImportError:  # no numba for this Python or platform: Signer uses the numpy definitions
    numba = None

LOG = logging.getLogger(__name__)
_tables: dict[str, np.ndarray] = {}


_SPACE = re.compile(r"\s")  # `str.isspace()`'s code points (both Py_UNICODE_ISSPACE), found in C


def _space_chars() -> np.ndarray:
    """Whether `str.split()` splits at each code point (`str.isspace`: the same test), as bools; built once."""
    table = _tables.get("space")
    if table is None:
        every = np.arange(0x110000, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
        table = np.zeros(0x110000, bool)
        table[[m.start() for m in _SPACE.finditer(every)]] = True
        _tables["space"] = table
    return table


LOWER_AS_TEXT = 0xFFFFFFFF  # `_lower_chars()`' mark of a code point `str.lower()` maps by context or to several


def _lower_chars() -> np.ndarray:
    """`str.lower()` of each code point (uint32), LOWER_AS_TEXT where it is not one code point alone; built once."""
    table = _tables.get("lower")
    if table is None:
        table = np.arange(0x110000, dtype=np.uint32)
        every = table.tobytes().decode("utf-32-le", "surrogatepass")
        block = 4096
        for start in range(0, 0x110000, block):
            part = every[start : start + block]
            lowered = part.lower()
            if lowered == part:
                continue
            if len(lowered) == len(part) and not start <= 0x3A3 < start + block:
                table[start : start + block] = np.frombuffer(lowered.encode("utf-32-le", "surrogatepass"), np.uint32)
                continue
            for c in range(start, start + len(part)):  # a block with İ or Σ: one code point at a time
                one = chr(c).lower()
                table[c] = ord(one) if len(one) == 1 else LOWER_AS_TEXT
        table[0x3A3] = LOWER_AS_TEXT  # Σ: σ or final ς, by its neighbours
        _tables["lower"] = table
    return table


NFC_TABLE_SIZE = 0x30000  # planes 0-2; a text with a code point beyond is normalized by unicodedata


def _nfc_tables() -> tuple[np.ndarray, np.ndarray]:
    """(canonical combining class, 1 where NFC's quick check may not say YES) per code point below NFC_TABLE_SIZE.

    UAX #15's quick check, its tables taken from this Python's `unicodedata` (so the same Unicode
    version as `unicodedata.normalize`), and conservative: a code point is marked when NFC changes
    it alone (NFC_QC=No), when it ends a two-code-point canonical decomposition that NFC recomposes
    or is a Hangul vowel or trailing consonant (it may compose with what precedes it: NFC_QC=Maybe).
    A text without marked code points whose combining classes are in canonical order is its own NFC;
    any other is normalized by `unicodedata.normalize`. Built once.
    """
    tables = _tables.get("nfc")
    if tables is None:
        every = np.arange(NFC_TABLE_SIZE, dtype=np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
        ccc = np.fromiter(map(unicodedata.combining, every), np.uint8, NFC_TABLE_SIZE)
        marked = np.zeros(NFC_TABLE_SIZE, np.uint8)
        for c in every:
            decomposition = unicodedata.decomposition(c)
            if not decomposition or decomposition.startswith("<"):
                continue
            if unicodedata.normalize("NFC", c) != c:
                marked[ord(c)] = 1
            parts = decomposition.split()
            if len(parts) == 2:
                marked[int(parts[1], 16)] = 1
        marked[0x1161:0x1176] = 1  # Hangul V jamo: L+V composes
        marked[0x11A8:0x11C3] = 1  # Hangul T jamo: LV+T composes
        tables = _tables["nfc"] = (ccc, marked)
    return tables


def _same_chars() -> np.ndarray:
    """The identity table: for text already lower-cased by `str.lower()`."""
    table = _tables.get("same")
    if table is None:
        table = _tables["same"] = np.arange(0x110000, dtype=np.uint32)
    return table


def _jit(fn):
    """Compiled by numba (nogil), the machine code cached on disk where numba finds a writable place."""
    try:
        return numba.njit(nogil=True, cache=True)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available": compiled in each process
        return numba.njit(nogil=True)(fn)


if numba is not None:
    _U = numba.uint64  # typed constants: a uint64 mixed with a Python int would be typed float64

    @numba.njit(inline="always")
    def _mix(x):
        x = (x ^ (x >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U(27))) * _U(0x94D049BB133111EB)
        return x ^ (x >> _U(31))

    @_jit
    def _word_hashes(points, lower, word_chars, char_key, base):
        """(uint64 hash of each run of word characters of `points` lower-cased by `lower`, True), in order.

        (empty, False) when a code point's lower case is LOWER_AS_TEXT: the text must be lower-cased whole.
        """
        n = points.shape[0]
        out = np.empty(n // 2 + 1, np.uint64)  # at most one word per two code points, plus one
        count = 0
        i = 0
        c = np.uint32(0)
        while i < n:
            c = lower[points[i]]
            if c == LOWER_AS_TEXT:
                return out[:0], False
            if not word_chars[c]:
                i += 1
                continue
            total = _U(0)
            power = _U(1)
            length = 0
            while True:
                total += _mix(_U(c) ^ char_key) * power
                power *= base
                length += 1
                i += 1
                if i == n:
                    break
                c = lower[points[i]]
                if c == LOWER_AS_TEXT:
                    return out[:0], False
                if not word_chars[c]:
                    break
            out[count] = _mix(total ^ _U(length))
            count += 1
        return out[:count], True

    @_jit
    def _ngram_hashes(hashes, n, seed):
        """uint64 hash of each n-gram of `hashes` (one for 1..n-1 words, none for none)."""
        m = hashes.shape[0]
        if m == 0:
            return np.empty(0, np.uint64)
        if m < n:
            n = m
        count = m - n + 1
        out = np.full(count, seed, np.uint64)
        # Word by word across all n-grams at once: independent lanes the compiler vectorizes,
        # where one n-gram at a time is a chain of n dependent mixes.
        for k in range(n):
            for i in range(count):
                out[i] = _mix(out[i] ^ hashes[i + k])
        return out

    @_jit
    def _signature(grams, a, b):
        """uint32 upper halves of the minima of a_i x + b_i mod 2^64 over the n-gram hashes x."""
        k = a.shape[0]
        mins = np.full(k, _U(0xFFFFFFFFFFFFFFFF), np.uint64)
        for j in range(grams.shape[0]):
            x = grams[j]
            for i in range(k):
                v = a[i] * x + b[i]
                if v < mins[i]:
                    mins[i] = v
        out = np.empty(k, np.uint32)
        for i in range(k):
            out[i] = np.uint32(mins[i] >> _U(32))
        return out

    @_jit
    def _collapsed_utf8(points, space_chars):
        """UTF-8 bytes of `points` with whitespace runs collapsed to one space, stripped (" ".join(s.split()))."""
        out = np.empty(4 * points.shape[0], np.uint8)
        m = 0
        gap = False  # whitespace since the last character written
        for i in range(points.shape[0]):
            c = np.int64(points[i])
            if space_chars[c]:
                gap = m > 0
                continue
            if gap:
                out[m] = 32
                m += 1
                gap = False
            if c < 0x80:
                out[m] = c
                m += 1
            elif c < 0x800:
                out[m] = 0xC0 | (c >> 6)
                out[m + 1] = 0x80 | (c & 0x3F)
                m += 2
            elif c < 0x10000:  # surrogates too, as "surrogatepass" encodes them
                out[m] = 0xE0 | (c >> 12)
                out[m + 1] = 0x80 | ((c >> 6) & 0x3F)
                out[m + 2] = 0x80 | (c & 0x3F)
                m += 3
            else:
                out[m] = 0xF0 | (c >> 18)
                out[m + 1] = 0x80 | ((c >> 12) & 0x3F)
                out[m + 2] = 0x80 | ((c >> 6) & 0x3F)
                out[m + 3] = 0x80 | (c & 0x3F)
                m += 4
        return out[:m]


    @_jit
    def _nfc_quick(points, ccc, marked):
        """True when the code points are surely their own NFC (UAX #15's quick check, `_nfc_tables`)."""
        last = 0
        size = ccc.shape[0]
        for i in range(points.shape[0]):
            c = np.int64(points[i])
            if c >= size or marked[c]:
                return False
            k = ccc[c]
            if k != 0 and last > k:
                return False
            last = k
        return True

    @_jit
    def _sign_batch(points, offsets, check_nfc, ccc, marked, lower, word_chars, char_key, base, n, seed, a, b,
                    space_chars, exact, near):
        """Many texts' code points (concatenated; text d at offsets[d]:offsets[d+1]) in one call, without the GIL.

        Returns (collapsed UTF-8 of every text, concatenated, and its offsets; uint32 signatures,
        one row per text; a status per text: 0 no signature (no n-grams), 1 signature, 2 to sign
        alone: not surely NFC (`check_nfc`) or a code point `str.lower()` maps by context).
        """
        docs = offsets.shape[0] - 1
        sigs = np.zeros((docs, a.shape[0] if near else 0), np.uint32)
        status = np.zeros(docs, np.uint8)
        collapsed = np.empty(4 * points.shape[0] if exact else 0, np.uint8)
        ends = np.zeros(docs + 1, np.int64)
        m = 0
        for d in range(docs):
            text = points[offsets[d]:offsets[d + 1]]
            ends[d + 1] = m
            if check_nfc and not _nfc_quick(text, ccc, marked):
                status[d] = 2
                continue
            if near:
                words, done = _word_hashes(text, lower, word_chars, char_key, base)
                if not done:
                    status[d] = 2
                    continue
                grams = _ngram_hashes(words, n, seed)
                if grams.shape[0]:
                    sigs[d] = _signature(grams, a, b)
                    status[d] = 1
            if exact:
                one = _collapsed_utf8(text, space_chars)
                collapsed[m:m + one.shape[0]] = one
                m += one.shape[0]
                ends[d + 1] = m
        return collapsed[:m], ends, sigs, status


def available() -> bool:
    """Whether numba is installed here (else `Signer` computes with the numpy definitions)."""
    return numba is not None


def _points(text: str) -> np.ndarray:
    """The text's code points: one byte each for an ASCII text (a copy of CPython's own bytes), else UTF-32."""
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), np.uint8)
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)


class Signer:
    """A text's exact key, word n-gram hashes and MinHash signature, the text normalized once.

    `normalization`: exact dedup's (ngrams.NORMALIZATIONS), None for no exact key; `ngram`: near
    dedup's n, None for no n-grams and signature. `compiled`: None uses numba where installed,
    False the numpy definitions, True requires numba.
    """

    def __init__(self, normalization: str | None, ngram: int | None, num_perm: int = 128, seed: int = 1,
                 compiled: bool | None = None):
        if normalization is not None:
            ngrams.normalize("", normalization)  # refuses an unknown one
        if ngram is not None and ngram < 1:
            raise ValueError("n-gram size must be >= 1")
        if compiled and numba is None:
            raise ImportError("numba is not installed: pip install 'pile-pipeline[fast]'")
        self._normalization, self._ngram = normalization, ngram
        self._hasher = minhash.MinHasher(num_perm, seed)
        self._keys = self._hasher.keys
        self._a, self._b = np.ascontiguousarray(self._keys[0]), np.ascontiguousarray(self._keys[1])
        self.compiled = numba is not None if compiled is None else compiled
        if self.compiled:
            self._word_chars, self._space_chars = ngrams.word_chars(), _space_chars()
            self._lower_chars, self._same_chars = _lower_chars(), _same_chars()

    def sign(self, text: str) -> tuple[bytes | None, np.ndarray | None, np.ndarray | None]:
        """(exact key or None, uint64 n-gram hashes or None, uint32 signature or None when no n-grams)."""
        if not self.compiled:
            return self._reference(text)
        normalization, key, grams, sig = self._normalization, None, None, None
        # NFC once for both keys (for most texts a quick check that returns the text itself), and
        # its code points once.
        # An ASCII text is its own NFC (and its check is free: CPython marks ASCII strings).
        plain = text.isascii() or (normalization in (None, "none") and self._ngram is None)
        nfc = text if plain else unicodedata.normalize("NFC", text)
        points = _points(nfc) if normalization == "nfc_whitespace" or self._ngram is not None else None
        if normalization == "nfc_whitespace":
            key = ngrams.blake2b_key(_collapsed_utf8(points, self._space_chars))
        elif normalization is not None:
            key = ngrams.blake2b_key((nfc if normalization == "nfc" else text).encode("utf-8", "surrogatepass"))
        if self._ngram is not None:
            words, done = _word_hashes(points, self._lower_chars, self._word_chars, ngrams.CHAR_KEY, ngrams.BASE)
            if not done:  # İ or Σ: str.lower() of the whole text
                words, _ = _word_hashes(_points(nfc.lower()), self._same_chars, self._word_chars, ngrams.CHAR_KEY,
                                        ngrams.BASE)
            grams = _ngram_hashes(words, self._ngram, ngrams.SEED)
            sig = _signature(grams, self._a, self._b) if len(grams) else None
        return key, grams, sig

    def sign_many(self, texts: list[str]) -> list[tuple[bytes | None, np.ndarray | None]]:
        """(exact key or None, signature or None) of each text: `sign`'s values without the n-grams.

        With the compiled kernels and the default normalization, the texts' code points go to one
        kernel call (per kind: ASCII bytes, other texts' UTF-32) that holds no GIL for the whole
        batch, so that worker threads sign in parallel; a text not surely NFC (or with İ or Σ) is
        signed alone by `sign`.
        """
        if not self.compiled or self._normalization not in (None, "nfc_whitespace"):
            return [self.sign(text)[::2] for text in texts]
        out: list = [None] * len(texts)
        ascii_texts = [i for i, text in enumerate(texts) if text.isascii()]
        other = [i for i, text in enumerate(texts) if not text.isascii()]
        for chosen, plain in ((ascii_texts, True), (other, False)):
            if not chosen:
                continue
            batch = [texts[i] for i in chosen]
            offsets = np.zeros(len(batch) + 1, np.int64)
            np.cumsum([len(text) for text in batch], out=offsets[1:])
            joined = "".join(batch)
            points = (np.frombuffer(joined.encode("ascii"), np.uint8) if plain else
                      np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32))
            ccc, marked = _nfc_tables()
            exact, near = self._normalization is not None, self._ngram is not None
            collapsed, ends, sigs, status = _sign_batch(
                points, offsets, not plain, ccc, marked, self._lower_chars, self._word_chars, ngrams.CHAR_KEY,
                ngrams.BASE, self._ngram or 1, ngrams.SEED, self._a, self._b, self._space_chars, exact, near)
            view = memoryview(collapsed)
            for j, i in enumerate(chosen):
                if status[j] == 2:
                    out[i] = self.sign(texts[i])[::2]
                    continue
                key = ngrams.blake2b_key(view[ends[j]:ends[j + 1]]) if exact else None
                out[i] = key, (sigs[j] if status[j] == 1 else None)
        return out

    def _reference(self, text: str):
        key = ngrams.exact_key(text, self._normalization) if self._normalization is not None else None
        grams = sig = None
        if self._ngram is not None:
            grams = ngrams.ngram_hashes(ngrams.text_word_hashes(text), self._ngram)
            sig = self._hasher.signature(grams, self._keys) if len(grams) else None
        return key, grams, sig


def warm_up() -> None:
    """Load the compiled kernels (for ASCII and other texts) and their tables in this process now.

    Best effort, for a driver whose worker threads will sign: whatever fails here fails again,
    and is reported, where a worker builds its own Signer.
    """
    try:
        signer = Signer("nfc_whitespace", 5)
        if signer.compiled:
            signer.sign("warm up")
            signer.sign("warm up \u00e9")
            signer.sign_many(["warm up", "warm up \u00e9"])
    except Exception:  # noqa: BLE001 -- see the docstring
        LOG.debug("loading the dedup kernels ahead failed", exc_info=True)
