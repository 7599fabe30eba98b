"""Every tokenizer engine of every kind, in one table by `--tokenizer_backend` name: `load_engine`.

    kind            backend           engine
    sentencepiece   sentencepiece     SentencePiece itself (the reference), `threads` per batch
                    gigatoken         gigatoken (MIT, beta), ~13x: Tokenizer.from_json of the model converted
                                      with the control pieces (<s>, </s>) as text (kinds/sp_json.py)
                    kitoken           kitoken (BSD-2), ~5-7x: Kitoken.from_sentencepiece; encode_specials=False
    huggingface     tokenizers        Tokenizer.encode per text, through encode_batch (the reference)
                    tokenizers_batch  Tokenizer.encode_batch_fast: the same library, the batch spread over its
                                      thread pool, no offsets computed
                    gigatoken         gigatoken from the same tokenizer.json, its special added tokens removed
                                      so that their strings in a text are text
    tiktoken        tiktoken          Encoding.encode_ordinary per text (the reference)
                    tiktoken_batch    Encoding.encode_ordinary_batch on `threads` threads

Which backends a kind has, and which `auto` tries, is its class (kinds/registry.py); a kind's
reference is `ReferenceEngine` (its `Tokenizer.encode`) unless the table names an engine of its own
(SentencePiece's, which sets its threads). An engine that is a package of its own (the `fast`
extra) says so (`package`): those are `FAST_BACKENDS`. Every engine is
built from a loaded `Tokenizer` (the kind's file is the single source of truth) and encodes a batch
of texts into (ids, offsets): one flat int32 array of every text's ids (special-token strings as
text, no BOS/EOS) and int64 offsets, text i being ids[offsets[i]:offsets[i + 1]]. Flat arrays spare
a Python int per token. A fast engine is used only after the driver's self-check
(pipeline/tokenize/self_check.py); `differences` is what `--verify_tokenizer` reports.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import sentencepiece as spm

from pipeline.core import versions
from pipeline.core.errors import JobError
from pipeline.core.memo import ProcessMemo
from pipeline.tokenize.kinds.base import Tokenizer, flatten
from pipeline.tokenize.kinds.registry import AUTO, KINDS
from pipeline.tokenize.pieces import PIECE_CHARS

# Engines each of whose calls starts with an empty word cache: fewer, larger calls cost less CPU per
# token (gigatoken's encode_batch). The others gain nothing from larger calls, and SentencePiece's
# Python lists of ids would cost memory.
BATCHED = frozenset({"gigatoken"})


class BackendUnavailable(RuntimeError):
    """A backend cannot be used with this tokenizer or in this environment; the message says why."""


class TokenizerMismatch(JobError, RuntimeError):
    """A fast backend gave ids that differ from the reference's (raised under `--verify_tokenizer fail`)."""


def package_version(backend: str) -> str | None:
    """Installed version of a backend's package (its own, else its kind's library's), or None when not installed."""
    package = getattr(_ENGINES.get(backend), "package", None) or next(
        (kind.package for kind in KINDS.values() if backend in kind.backends and backend != AUTO), None)
    return versions.package_version(package) if package else None


def backend_version(backend: str, tokenizer: Tokenizer) -> str | None:
    """The version the manifest records for a backend: its own package's, else the kind's library's."""
    if backend in FAST_BACKENDS:
        return package_version(backend)
    return next(iter(tokenizer.versions().values()))


def import_backend(backend: str) -> None:
    """Import a fast backend's modules now, if installed (so that engines built later start at once)."""
    for name in getattr(_ENGINES.get(backend), "modules", ()):
        try:
            importlib.import_module(name)
        except ImportError:
            return


class SentencePieceEngine:
    """SentencePiece itself, `threads` per batch (None: all cores)."""

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        self._sp = spm.SentencePieceProcessor()  # its own: the self-check encodes on several threads
        self._sp.LoadFromSerializedProto(tokenizer.proto)
        # SentencePiece spreads a batch over all cores by default; with one worker process per core
        # that oversubscribes the machine, so workers pass threads=1.
        self._threads = -1 if threads is None else threads

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        return flatten(self._sp.encode(texts, num_threads=self._threads) if texts else [])


class KitokenEngine:
    """kitoken over a SentencePiece model; a literal "<s>" in a document is text (encode_specials=False)."""

    package = "kitoken"
    modules = ("kitoken",)

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        try:
            import kitoken
        except ImportError as e:
            raise BackendUnavailable(f"kitoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        try:
            self._kt = kitoken.Kitoken.from_sentencepiece(tokenizer.proto)
        except Exception as e:  # kitoken raises its own error types
            raise BackendUnavailable(f"kitoken cannot load the model: {e}") from None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        return flatten([self._kt.encode(text, False) for text in texts])


# sha256 -> the one gigatoken.Tokenizer of every engine of this process built from that file:
# DirectRunner's worker threads share it (built once; it may be called from several threads at once
# with the same ids, tests/test_backends.py). encode_batch keeps nothing from one call to the next,
# so memory does not grow with the text through it (tests/test_backends.py).
_GIGATOKENS = ProcessMemo(2)


class GigatokenEngine:
    """gigatoken over the tokenizer.json its kind gives it (`gigatoken_json`), one encoder per process and file."""

    package = "gigatoken"
    modules = ("awkward", "gigatoken")

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        try:
            import awkward
            import gigatoken
        except ImportError as e:
            raise BackendUnavailable(f"gigatoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        self._ak = awkward
        # Parallel only when this process has cores to itself (threads > 1).
        self._parallel = threads is None or threads > 1
        try:
            self._tok = _GIGATOKENS.get(tokenizer.sha256,
                                        lambda: gigatoken.Tokenizer.from_json(tokenizer.gigatoken_json()))
        except Exception as e:  # the converter raises ValueError; the Rust loader its own errors
            raise BackendUnavailable(f"gigatoken cannot load the tokenizer: {e}") from None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        if not texts:
            return flatten([])
        # encode_batch returns an awkward array (flat ids + counts), half the cost of building Python lists.
        ak = self._ak
        out = self._tok.encode_batch(texts, parallel=self._parallel)
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(ak.to_numpy(ak.num(out)), out=offsets[1:])
        return ak.to_numpy(ak.flatten(out)).view(np.int32), offsets


class ReferenceEngine:
    """The tokenizer's own reference encode (`tokenizers`, `tiktoken`).

    threads=1 (each worker owns one core) keeps `tokenizers`' batch on the calling thread. A long
    text's pieces go one per call: a batch of several 256K-character pieces costs more CPU than the
    same pieces one by one (the fast engines parallelize a batch, so they keep theirs).
    """

    piece_batch_chars = PIECE_CHARS

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        self._tokenizer = tokenizer
        if threads == 1:
            tokenizer.single_thread()

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        return self._tokenizer.encode(texts)


class TokenizersBatchEngine:
    """`tokenizers.Tokenizer.encode_batch_fast` on the library's thread pool (every core).

    threads=1 (a worker process that owns one core) turns the pool off for the process
    (TOKENIZERS_PARALLELISM=false, which the library reads at every call): the batch then runs on the
    calling thread, still without the offsets the reference computes.
    """

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        self._tok = tokenizer.library
        if threads == 1:
            tokenizer.single_thread()

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        if not texts:
            return flatten([])
        return flatten([e.ids for e in self._tok.encode_batch_fast(texts, add_special_tokens=False)])


class TiktokenBatchEngine:
    """`tiktoken.Encoding.encode_ordinary_batch` on `threads` threads (None: every core)."""

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        self._enc = tokenizer.library
        self._threads = threads or os.cpu_count() or 1

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        if not texts:
            return flatten([])
        if self._threads == 1:
            enc = self._enc
            return flatten([enc.encode_ordinary(t) for t in texts])
        return flatten(self._enc.encode_ordinary_batch(list(texts), num_threads=self._threads))


# By --tokenizer_backend name; a kind's reference not named here is `ReferenceEngine`.
_ENGINES = {"sentencepiece": SentencePieceEngine, "gigatoken": GigatokenEngine, "kitoken": KitokenEngine,
            "tokenizers_batch": TokenizersBatchEngine, "tiktoken_batch": TiktokenBatchEngine}
# The fast engines that are packages of their own (the `fast` extra): their version is recorded; the
# other engines are their kind's own library's.
FAST_BACKENDS = tuple(name for name, engine in _ENGINES.items() if getattr(engine, "package", None))


def load_engine(backend: str, tokenizer: Tokenizer, threads: int | None = None):
    """An engine for `backend` over a loaded tokenizer; BackendUnavailable with the reason when it does not apply.

    `threads`: how many threads one batch may use (None: the engine's default, all cores).
    """
    kind = KINDS[tokenizer.kind]
    if backend not in kind.backends or backend == AUTO:
        raise BackendUnavailable(f"tokenizer backend {backend!r} does not encode {tokenizer.kind} tokenizers; "
                                 f"choose one of {kind.backends}")
    problems = tokenizer.engine_problems(backend)
    if problems:
        raise BackendUnavailable("; ".join(problems))
    engine = _ENGINES.get(backend, ReferenceEngine if backend == kind.reference else None)
    if engine is None:
        raise BackendUnavailable(f"tokenizer backend {backend!r} has no engine")
    return engine(tokenizer, threads)


def mismatched(expected: tuple[np.ndarray, np.ndarray], got: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """Indices of the texts whose ids differ between two (ids, offsets) encodings of the same texts."""
    (a, a_off), (b, b_off) = expected, got
    if np.array_equal(a_off, b_off) and np.array_equal(a, b):
        return []
    return [i for i in range(len(a_off) - 1)
            if not np.array_equal(a[a_off[i] : a_off[i + 1]], b[b_off[i] : b_off[i + 1]])]


def first_difference(expected: np.ndarray, got: np.ndarray) -> int:
    """Position of the first differing id of two id arrays (the shorter length when one is a prefix)."""
    n = min(len(expected), len(got))
    diff = np.flatnonzero(expected[:n] != got[:n])
    return int(diff[0]) if len(diff) else n


def differences(backend: str, reference: str, want: tuple, got: tuple) -> list[tuple[int, str]]:
    """[(index, what differs)] for the texts whose ids (`got`: ids, offsets) differ from the reference's (`want`)."""
    (want_ids, want_off), (ids, offsets) = want, got
    out = []
    for i in mismatched(want, got):
        a, b = want_ids[want_off[i] : want_off[i + 1]], ids[offsets[i] : offsets[i + 1]]
        out.append((i, f"{backend} ids differ from {reference}'s from token {first_difference(a, b)} "
                       f"({len(b)} vs {len(a)} tokens)"))
    return out
