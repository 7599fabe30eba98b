"""The compiled signatures and exact keys (pipeline/core/minhash_kernel.py) equal the numpy definitions'."""

import doctest
import json
import random
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kind_fixtures import real_documents

from pipeline.core import minhash, minhash_kernel, ngrams

needs_numba = pytest.mark.skipif(not minhash_kernel.available(), reason="numba is not installed")

REAL = real_documents()
TEXTS = REAL + [p for doc in REAL for p in doc.split("\n\n")][:400]
# What can make a compiled pass differ from the definitions: case mappings that change the length
# (İ), context (final sigma), NFC composition (combining marks, Hangul jamo), ligatures, every kind of
# whitespace str.split() knows (ASCII and others), lone surrogates, astral characters, word joiners.
SPECIAL = ["a", "B", "z", "0", "_", " ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x85", "\xa0",
           "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000", "\u200b", "\u2060", "\ufeff",
           "e", "\u0301", "\u0308", "\u0345", "\u0130", "\u0131", "I", "i", "\xdf", "\u1e9e", "\u03a3", "\u03c3",
           "\u03c2", "\ufb01", "\u212a", "\u1100", "\u1161", "\u11a8", "\uac00", "\ud800", "\udc00", "\udfff",
           "\U0001d518", "\U0001f600", "\U00010400", "\U0010ffff", ",", ".", "-", "'", "\u00b7", "\u0660"]
FUZZ = st.text(st.sampled_from(SPECIAL) | st.characters(codec=None), max_size=300)


def _equal(text, normalization="nfc_whitespace", ngram=5, num_perm=128, seed=1):
    fast = minhash_kernel.Signer(normalization, ngram, num_perm, seed, compiled=True).sign(text)
    slow = minhash_kernel.Signer(normalization, ngram, num_perm, seed, compiled=False).sign(text)
    assert fast[0] == slow[0], repr(text)
    for got, want in zip(fast[1:], slow[1:], strict=True):
        assert (got is None) == (want is None), repr(text)
        if want is not None:
            assert got.dtype == want.dtype and np.array_equal(got, want), repr(text)


def test_doctests():
    assert doctest.testmod(minhash_kernel).failed == 0


def test_the_reference_path_is_the_definitions():
    signer = minhash_kernel.Signer("nfc", 3, 32, seed=4, compiled=False)
    text = "Cafe\u0301 au lait, cafe\u0301 noir; CAFÉ crème."
    key, grams, sig = signer.sign(text)
    assert key == ngrams.exact_key(text, "nfc")
    want = ngrams.ngram_hashes(ngrams.text_word_hashes(text), 3)
    assert np.array_equal(grams, want)
    assert np.array_equal(sig, minhash.MinHasher(32, 4).signature(want))


@needs_numba
@pytest.mark.parametrize("normalization", ngrams.NORMALIZATIONS)
def test_real_text_gives_the_definitions_values(normalization):
    for text in TEXTS:
        _equal(text, normalization)


@needs_numba
@pytest.mark.parametrize("ngram", [1, 2, 13])
def test_other_ngram_sizes_and_permutations(ngram):
    for text in TEXTS[:60]:
        _equal(text, ngram=ngram, num_perm=64, seed=7)


@needs_numba
@pytest.mark.parametrize("text", ["", " ", " \t\n\u3000", ".,;", "word", "  Word  ", "two words", "one two three four",
                                  "\ud800", "a\udfffb \ud800", "\U0001d518\U0001d518 x", "\u0130stanbul \u0130I",
                                  "\u03a3\u03a3 \u03c3\u03a3. \u03a3", "Stra\xdfe STRASSE", "e\u0301 \xe9", "x" * 5000])
def test_edge_texts(text):
    for normalization in ngrams.NORMALIZATIONS:
        _equal(text, normalization)
        _equal(text, normalization, ngram=1)


@needs_numba
def test_no_words_give_no_signature_and_a_key():
    key, grams, sig = minhash_kernel.Signer("nfc_whitespace", 5, compiled=True).sign(" ,.; ")
    assert key == ngrams.exact_key(",.;") and len(grams) == 0 and sig is None


@needs_numba
def test_the_signer_computes_only_what_is_asked():
    assert minhash_kernel.Signer(None, 5, compiled=True).sign("a b c")[0] is None
    assert minhash_kernel.Signer("nfc", None, compiled=True).sign("a b c")[1:] == (None, None)


@needs_numba
@settings(max_examples=400, deadline=None)
@given(FUZZ)
def test_fuzzed_text_gives_the_definitions_values(text):
    for normalization in ngrams.NORMALIZATIONS:
        _equal(text, normalization)
    _equal(text, ngram=2, num_perm=16, seed=3)


def test_lower_table_is_str_lower_of_each_code_point_but_two():
    table = minhash_kernel._lower_chars()
    marked = np.flatnonzero(table == minhash_kernel.LOWER_AS_TEXT).tolist()
    assert marked == [0x130, 0x3A3]  # İ lower-cases to two code points, Σ by its neighbours
    every = "".join(map(chr, range(0x110000)))
    assert all(chr(table[c]) == ch.lower() for c, ch in enumerate(every) if c not in marked)


def test_ascii_texts_read_from_their_own_bytes_give_the_definitions_values():
    every = "".join(map(chr, range(128)))  # ASCII's whitespace includes \x1c-\x1f, which str.split() splits at
    assert minhash_kernel._points(every).dtype == np.uint8 and minhash_kernel._points(every + "é").dtype == np.uint32
    rng = random.Random(7)
    for _ in range(200):
        text = "".join(rng.choice(every + "  aaaaeeeeZZ") for _ in range(rng.randrange(0, 60)))
        for normalization in ngrams.NORMALIZATIONS:
            _equal(text, normalization)
        _equal(text, ngram=2, num_perm=16, seed=3)


@pytest.mark.slow
@needs_numba
def test_warm_up_loads_every_kernel_a_worker_calls():
    code = """
import json
from pipeline.core import minhash_kernel as mk
mk.warm_up()
print(json.dumps({name: len(getattr(mk, name).signatures)
                  for name in ("_collapsed_utf8", "_word_hashes", "_ngram_hashes", "_signature", "_sign_batch")}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    # uint8 (ASCII) and uint32 code points for the two that read the text
    assert out == {"_collapsed_utf8": 2, "_word_hashes": 2, "_ngram_hashes": 1, "_signature": 1, "_sign_batch": 2}


def test_whitespace_table_is_str_split():
    table = minhash_kernel._space_chars()
    every = "".join(map(chr, range(0x110000)))
    assert "".join(every.split()) == "".join(c for c, space in zip(every, table.tolist(), strict=True) if not space)


@pytest.mark.slow
def test_without_numba_the_signer_uses_the_definitions():
    text = "Een twee drie vier vijf zes, \u0130stanbul \ud800 zeven."
    code = f"""
import json, sys
sys.modules["numba"] = None  # as on a platform numba has no wheel for
from pipeline.core import minhash_kernel
signer = minhash_kernel.Signer("nfc_whitespace", 5, 128, 1)
key, grams, sig = signer.sign({text!r})
print(json.dumps([minhash_kernel.available(), signer.compiled, key.hex(), grams.tolist(), sig.tolist()]))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    key, grams, sig = minhash_kernel.Signer("nfc_whitespace", 5, 128, 1, compiled=False).sign(text)
    assert out == [False, False, key.hex(), grams.tolist(), sig.tolist()]


def _sign_many_equals_sign(texts, normalization="nfc_whitespace", ngram=5, num_perm=128, seed=1):
    batch = minhash_kernel.Signer(normalization, ngram, num_perm, seed).sign_many(texts)
    reference = minhash_kernel.Signer(normalization, ngram, num_perm, seed, compiled=False)
    assert len(batch) == len(texts)
    for text, (key, sig) in zip(texts, batch, strict=True):
        want_key, _, want_sig = reference.sign(text)
        assert key == want_key, repr(text)
        assert (sig is None) == (want_sig is None), repr(text)
        if want_sig is not None:
            assert sig.dtype == want_sig.dtype and np.array_equal(sig, want_sig), repr(text)


@needs_numba
@pytest.mark.parametrize(("normalization", "ngram"), [("nfc_whitespace", 5), ("nfc_whitespace", None), (None, 5),
                                                      ("nfc", 5), ("none", 3)])
def test_batches_give_the_definitions_values(normalization, ngram):
    # ASCII and other texts mixed in one batch; texts NFC changes, İ and Σ, no words, empty ones
    texts = TEXTS[:80] + ["", " ", ".,;", "e\u0301 x y", "\u1100\u1161 a b c", "\u0130stanbul one two",
                          "\u03a3\u03a3 word word", "\ud800 lone one", "a\U00030000b c d e", "\u0958 x y",
                          "\u212b \u2126 ohm", "x" * 5000]
    _sign_many_equals_sign(texts, normalization, ngram)


@needs_numba
@settings(max_examples=150, deadline=None)
@given(st.lists(FUZZ, max_size=12))
def test_fuzzed_batches_give_the_definitions_values(texts):
    _sign_many_equals_sign(texts)
    _sign_many_equals_sign(texts, ngram=2, num_perm=16, seed=3)


@needs_numba
@settings(max_examples=400, deadline=None)
@given(FUZZ)
def test_nfc_quick_check_says_yes_only_for_nfc_text(text):
    ccc, marked = minhash_kernel._nfc_tables()
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), np.uint32)
    if minhash_kernel._nfc_quick(points, ccc, marked):
        assert unicodedata.normalize("NFC", text) == text


@needs_numba
def test_nfc_quick_check_passes_nfc_text_of_every_script():
    # the batch's fast path: real NFC text is not sent to unicodedata one document at a time
    ccc, marked = minhash_kernel._nfc_tables()
    texts = [t for t in TEXTS if not t.isascii() and unicodedata.normalize("NFC", t) == t]
    texts += ["Grüße, café, naïve", "Привет мир", "日本語のテキスト", "한국어 문장", "नमस्ते दुनिया", "שלום עולם",
              "مرحبا بالعالم", "Ελληνικά", "😀 emoji 🇺🇸"]
    passed = [t for t in texts if minhash_kernel._nfc_quick(
        np.frombuffer(t.encode("utf-32-le", "surrogatepass"), np.uint32), ccc, marked)]
    assert len(passed) >= 0.9 * len(texts), [t[:40] for t in texts if t not in passed]
    for char in ("\u0301", "\u1161", "\u11a8", "\u212b", "\u0958", "\U0001d15e"):  # Maybe or No: to unicodedata
        assert marked[ord(char)], hex(ord(char))
