"""Tokenizer engines: SentencePiece (the reference) and faster engines that must give identical ids.

The SentencePiece `.model` file stays the single source of truth: every engine is built from its
bytes, in each worker, and a fast engine is used only when it gives SentencePiece's ids (the
driver checks that first: pipeline/tokenize/self_check.py).

  backend        engine                               built from the .model by
  sentencepiece  sentencepiece (reference)            SentencePieceProcessor
  gigatoken      gigatoken (MIT, beta), ~13x          Tokenizer.from_json of the model converted with
                                                      the control pieces (<s>, </s>) as text, as in
                                                      SentencePiece (pipeline/tokenize/spm_json.py)
  kitoken        kitoken (BSD-2), ~5-7x               Kitoken.from_sentencepiece; encode_specials=False

Every engine encodes a batch of texts into (ids, offsets): one flat int32 array of every text's ids
(no BOS/EOS) and int64 offsets, text i being ids[offsets[i]:offsets[i + 1]]. Flat arrays spare a
Python int per token.

`Encoder` is what workers use. With `verify` it also runs SentencePiece on every document and
returns the documents whose ids differ (the pipeline dead-letters them or fails: `--verify_tokenizer`).
A model's facts and gigatoken's converted model are built once per process (`model_facts`,
`gigatoken_json` keep the last few; `adopt_built` takes them from the process that ran the
self-check): DirectRunner's worker threads reuse what the driver built for its self-check, and
nothing of the model travels inside a pickled DoFn (Beam compresses those with bz2, ~0.2 s per copy
of a converted 32k model, several copies per job).
"""

from __future__ import annotations

import importlib
import itertools
import logging

import numpy as np
import sentencepiece as spm

from pipeline.core import versions
from pipeline.core.errors import JobError
from pipeline.core.memo import ProcessMemo
from pipeline.io.files import read_bytes
from pipeline.tokenize import bpe_pieces, spm_json
from pipeline.tokenize.model_facts import ModelFacts, model_problems
from pipeline.tokenize.pieces import CUTS, PieceEncoder

LOG = logging.getLogger(__name__)

SENTENCEPIECE = "sentencepiece"
FAST_BACKENDS = ("gigatoken", "kitoken")  # the order `auto` tries them in: fastest first
AUTO = "auto"
BACKENDS = (SENTENCEPIECE, *FAST_BACKENDS, AUTO)
_PACKAGES = {SENTENCEPIECE: "sentencepiece", "gigatoken": "gigatoken", "kitoken": "kitoken"}

# Engines each of whose calls starts with an empty word cache: fewer, larger calls cost less CPU per
# token (gigatoken's encode_batch). The others gain nothing from larger calls, and SentencePiece's
# Python lists of ids would cost memory.
BATCHED = frozenset({"gigatoken"})


class BackendUnavailable(RuntimeError):
    """A fast backend cannot be used with this model or in this environment; the message says why."""


class TokenizerMismatch(JobError, RuntimeError):
    """A fast backend gave ids that differ from SentencePiece's (raised under `--verify_tokenizer fail`)."""


def package_version(backend: str) -> str | None:
    """Installed version of a backend's package, or None when it is not installed."""
    return versions.package_version(_PACKAGES[backend])


_MODULES = {"gigatoken": ("awkward", "gigatoken"), "kitoken": ("kitoken",)}


def import_backend(backend: str) -> None:
    """Import a fast backend's modules now, if installed (so that engines built later start at once)."""
    for name in _MODULES.get(backend, ()):
        try:
            importlib.import_module(name)
        except ImportError:
            return


def flatten(lists: list) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets) of a list of id lists."""
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(lists), np.int32, int(offsets[-1]))
    return ids, offsets


class SentencePieceEngine:
    """The reference engine: SentencePiece itself, `threads` per batch (None: all cores)."""
    def __init__(self, proto: bytes, facts: ModelFacts | None = None, threads: int | None = None):
        self._sp = spm.SentencePieceProcessor()
        self._sp.LoadFromSerializedProto(proto)
        # SentencePiece spreads a batch over all cores by default; with one worker process per core
        # that oversubscribes the machine (~10% slower measured here), so workers pass threads=1.
        self._threads = -1 if threads is None else threads

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        return flatten(self._sp.encode(texts, num_threads=self._threads) if texts else [])


class _KitokenEngine:
    def __init__(self, proto: bytes, facts: ModelFacts, threads: int | None = None):
        try:
            import kitoken
        except ImportError as e:
            raise BackendUnavailable(f"kitoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        try:
            self._kt = kitoken.Kitoken.from_sentencepiece(proto)
        except Exception as e:  # kitoken raises its own error types
            raise BackendUnavailable(f"kitoken cannot load the model: {e}") from None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # encode_specials=False: a literal "<s>" in a document is text, as in SentencePiece.
        return flatten([self._kt.encode(text, False) for text in texts])


_FACTS = ProcessMemo()  # model bytes -> ModelFacts
_CONVERTED = ProcessMemo()  # model bytes -> gigatoken_json


def model_facts(proto: bytes) -> ModelFacts:
    """`ModelFacts.from_proto`, once per process and model."""
    return _FACTS.get(proto, lambda: ModelFacts.from_proto(proto))


def built_from_models() -> dict:
    """What this process has derived from models (facts, conversions, safe cuts), for `adopt_built`."""
    return {"facts": _FACTS.items(), "converted": _CONVERTED.items(), "cuts": CUTS.items(),
            "bpe_cuts": bpe_pieces.CUTS.items()}


def adopt_built(built: dict) -> None:
    """Take what another process derived from models (the self-check's) as this one's."""
    _FACTS.adopt(built["facts"])
    _CONVERTED.adopt(built["converted"])
    CUTS.adopt(built["cuts"])
    bpe_pieces.CUTS.adopt(built["bpe_cuts"])


def gigatoken_json(proto: bytes) -> str:
    """The tokenizer.json gigatoken loads for a .model, control pieces as text (once per process).

    gigatoken's own loader (`Tokenizer.from_sentencepiece`) lists control pieces (<s>, </s>) as
    added special tokens, which it matches in the text: a literal "<s>" in a document would become
    id 1. pipeline/tokenize/spm_json.py converts the model without them.
    """
    return _CONVERTED.get(proto, lambda: spm_json.tokenizer_json(proto, model_facts(proto)))


# model bytes -> the one gigatoken.Tokenizer of every engine of this process built from that model:
# DirectRunner's worker threads share it (built once, ~0.1 s; it may be called from several threads at
# once with the same ids, tests/test_backends.py). encode_batch keeps nothing from one call to the
# next, so memory does not grow with the text through it (tests/test_backends.py).
_GIGATOKENS = ProcessMemo(2)


class _GigatokenEngine:
    def __init__(self, proto: bytes, facts: ModelFacts, threads: int | None = None):
        try:
            import awkward
            import gigatoken
        except ImportError as e:
            raise BackendUnavailable(f"gigatoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        self._ak = awkward
        self._parallel = threads is None or threads > 1
        try:
            spec = gigatoken_json(proto)
            self._tok = _GIGATOKENS.get(proto, lambda: gigatoken.Tokenizer.from_json(spec))
        except Exception as e:  # the converter raises ValueError; the Rust loader its own errors
            raise BackendUnavailable(f"gigatoken cannot load the model: {e}") from None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not texts:
            return flatten([])
        # parallel only when this process has cores to itself (threads > 1). encode_batch returns
        # an awkward array (flat ids + counts), half the cost of building Python lists.
        ak = self._ak
        out = self._tok.encode_batch(texts, parallel=self._parallel)
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(ak.to_numpy(ak.num(out)), out=offsets[1:])
        return ak.to_numpy(ak.flatten(out)).view(np.int32), offsets


_ENGINES = {SENTENCEPIECE: SentencePieceEngine, "gigatoken": _GigatokenEngine, "kitoken": _KitokenEngine}


def load_engine(backend: str, proto: bytes, facts: ModelFacts | None = None, threads: int | None = None):
    """An engine for `backend` from the model bytes; raises BackendUnavailable with the reason.

    `threads`: how many threads one batch may use (None: the engine's default, all cores).
    """
    if backend not in _ENGINES:
        raise ValueError(f"unknown tokenizer backend {backend!r}; choose one of {BACKENDS}")
    if backend == SENTENCEPIECE:
        return SentencePieceEngine(proto, threads=threads)
    facts = facts or model_facts(proto)
    problems = model_problems(backend, facts)
    if problems:
        raise BackendUnavailable("; ".join(problems))
    return _ENGINES[backend](proto, facts, threads)


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



class Encoder:
    """Batch encoder used inside workers; pickles as the model path, backend name and verify flag.

    `threads`: threads per batch (None: all cores; 1 when each core runs its own worker process).
    """

    def __init__(self, model_path: str, backend: str, verify: bool = False, threads: int | None = None):
        self._model_path = model_path
        self._backend = backend
        self._threads = threads
        self._verify = verify and backend != SENTENCEPIECE
        self._engine = None
        self._pieces = None  # the engine, encoding long documents in pieces
        self._reference = None

    @property
    def backend(self) -> str:
        """The backend's name."""
        return self._backend

    def load(self, proto: bytes | None = None) -> None:
        """Load the model (call once per worker, in DoFn.setup); `proto`: its bytes, when already read."""
        proto = read_bytes(self._model_path) if proto is None else proto
        try:
            engine = load_engine(self._backend, proto, threads=self._threads)
        except BackendUnavailable as e:
            # The driver checked this backend; a worker without it must not quietly use another.
            raise RuntimeError(f"tokenizer backend {self._backend}, chosen by the driver, fails on this "
                               f"worker: {e}") from None
        # Documents over ~1 MB are encoded in pieces with the same ids: memory stays bounded.
        self._engine, self._pieces = engine, PieceEncoder(engine, proto)
        if self._verify:
            self._reference = PieceEncoder(SentencePieceEngine(proto, threads=self._threads), proto)

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every text's ids (without BOS/EOS) in one int32 array, and offsets.

        Returns (ids, offsets): text i's ids are ids[offsets[i]:offsets[i + 1]].
        """
        if self._engine is None:
            self.load()
        return self._pieces.encode(texts)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without BOS/EOS."""
        ids, offsets = self.encode_flat(texts)
        return [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]

    def encode_verified(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """`encode_flat`, plus [(index, what differs)] for the texts whose ids differ from SentencePiece's.

        Without verification (or with SentencePiece itself) the list is always empty.
        """
        ids, offsets = self.encode_flat(texts)
        if not self._verify or not texts:
            return ids, offsets, []
        return ids, offsets, differences(self._backend, "SentencePiece", self._reference.encode(texts), (ids, offsets))

    def __getstate__(self):
        return {**self.__dict__, "_engine": None, "_pieces": None, "_reference": None}


def differences(backend: str, reference: str, want: tuple, got: tuple) -> list[tuple[int, str]]:
    """[(index, what differs)] for the texts whose ids (`got`: ids, offsets) differ from the reference's (`want`)."""
    (want_ids, want_off), (ids, offsets) = want, got
    out = []
    for i in mismatched(want, got):
        a, b = want_ids[want_off[i] : want_off[i + 1]], ids[offsets[i] : offsets[i + 1]]
        out.append((i, f"{backend} ids differ from {reference}'s from token {first_difference(a, b)} "
                       f"({len(b)} vs {len(a)} tokens)"))
    return out
