"""Engines for Hugging Face and tiktoken tokenizers: the owning library's reference and its fast batch encode.

    kind         backend            engine
    huggingface  tokenizers         Tokenizer.encode per text, through encode_batch (the reference)
                 tokenizers_batch   Tokenizer.encode_batch_fast: the same library, the batch spread
                                    over its thread pool, no offsets computed
                 gigatoken          gigatoken (MIT, beta) from the same tokenizer.json, its special
                                    added tokens removed so that their strings in a text are text
                                    (`auto` tries it first, then tokenizers_batch)
    tiktoken     tiktoken           Encoding.encode_ordinary per text (the reference)
                 tiktoken_batch     Encoding.encode_ordinary_batch on `threads` threads

Every engine encodes a batch of texts into (ids, offsets), like pipeline/tokenize/engines.py's,
special-token strings as text, no BOS/EOS. A fast engine is used only after the driver's self-check
(pipeline/tokenize/kind_check.py). `KindEncoder` is what workers use: it loads the tokenizer from
its location (refusing one whose sha256 is not the checked one), encodes long documents in pieces
(pipeline/tokenize/bpe_pieces.py) and, with `verify`, compares every document with the reference.
"""

from __future__ import annotations

import json
import os

import numpy as np

from pipeline.core.memo import ProcessMemo
from pipeline.tokenize.bpe_pieces import BpePieceEncoder
from pipeline.tokenize.engines import BackendUnavailable, differences
from pipeline.tokenize.kinds.base import HUGGINGFACE, TIKTOKEN, Tokenizer, flatten
from pipeline.tokenize.kinds.detect import load_tokenizer
from pipeline.tokenize.pieces import PIECE_CHARS

AUTO = "auto"
REFERENCE = {HUGGINGFACE: "tokenizers", TIKTOKEN: "tiktoken"}
FAST = {HUGGINGFACE: ("tokenizers_batch", "gigatoken"), TIKTOKEN: ("tiktoken_batch",)}
# What `auto` tries, fastest first: gigatoken's per-call word cache makes it ~30x `tokenizers`' encode per
# core on real text (scripts/bench/bench_tokenizer_kinds.py), the batch encode ~1.5x.
AUTO_ORDER = {HUGGINGFACE: ("gigatoken", "tokenizers_batch"), TIKTOKEN: ("tiktoken_batch",)}


def backends(kind: str) -> tuple[str, ...]:
    """The `--tokenizer_backend` values for a kind: its reference, its fast engines, auto."""
    if kind not in REFERENCE:
        raise ValueError(f"no engines here for {kind!r} tokenizers (SentencePiece's: pipeline/tokenize/engines.py)")
    return (REFERENCE[kind], *FAST[kind], AUTO)


def _tokenizers_pool_off() -> None:
    """`tokenizers`' batches on the calling thread, for the whole process (the library reads this at every call)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


class ReferenceEngine:
    """The tokenizer's own reference encode.

    threads=1 (each worker owns one core) keeps `tokenizers`' batch on the calling thread.
    """

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        self._tokenizer = tokenizer
        if threads == 1 and tokenizer.kind == HUGGINGFACE:
            _tokenizers_pool_off()

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
            _tokenizers_pool_off()

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


def gigatoken_spec(tokenizer: Tokenizer) -> str:
    """The tokenizer.json gigatoken loads: without truncation, padding and special added tokens.

    gigatoken matches added tokens in the text: a special one's string in a document would become its id.
    """
    spec = json.loads(tokenizer.data)
    spec["added_tokens"] = [t for t in spec.get("added_tokens") or [] if not t.get("special")]
    spec["truncation"] = spec["padding"] = None
    return json.dumps(spec, ensure_ascii=False)


_GIGATOKENS = ProcessMemo(2)  # tokenizer.json sha256 -> the gigatoken encoder the threads share (engines.py)


class GigatokenEngine:
    """gigatoken over a tokenizer.json (see `gigatoken_spec`), one encoder per process and tokenizer."""

    def __init__(self, tokenizer: Tokenizer, threads: int | None = None):
        try:
            import awkward
            import gigatoken
        except ImportError as e:
            raise BackendUnavailable(f"gigatoken is not installed ({e}); pip install 'pile-pipeline[fast]'") from None
        self._ak = awkward
        self._parallel = None if threads is None or threads > 1 else False
        try:
            self._tok = _GIGATOKENS.get(tokenizer.sha256,
                                        lambda: gigatoken.Tokenizer.from_json(gigatoken_spec(tokenizer)))
        except Exception as e:  # the Rust loader raises its own errors
            raise BackendUnavailable(f"gigatoken cannot load the tokenizer: {e}") from None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, offsets) of the texts."""
        if not texts:
            return flatten([])
        ak = self._ak
        out = self._tok.encode_batch(texts, parallel=self._parallel)
        offsets = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(ak.to_numpy(ak.num(out)), out=offsets[1:])
        return ak.to_numpy(ak.flatten(out)).view(np.int32), offsets


_ENGINES = {"tokenizers": ReferenceEngine, "tiktoken": ReferenceEngine, "tokenizers_batch": TokenizersBatchEngine,
            "tiktoken_batch": TiktokenBatchEngine, "gigatoken": GigatokenEngine}


def load_kind_engine(backend: str, tokenizer: Tokenizer, threads: int | None = None):
    """An engine for `backend` over a loaded tokenizer; BackendUnavailable when it does not apply."""
    if backend not in backends(tokenizer.kind) or backend == AUTO:
        raise BackendUnavailable(f"tokenizer backend {backend!r} does not encode {tokenizer.kind} tokenizers; "
                                 f"choose one of {backends(tokenizer.kind)}")
    return _ENGINES[backend](tokenizer, threads)


class KindEncoder:
    """Batch encoder used inside workers; pickles as its settings (location, sha256, backend, verify).

    `tiktoken_name`: the built-in pattern and specials of a ranks file (as loaded by the driver).
    `threads`: threads per batch (None: all cores; 1 when each core runs its own worker process).
    """

    def __init__(self, path: str, backend: str, *, sha256: str | None = None, tiktoken_name: str | None = None,
                 verify: bool = False, threads: int | None = None):
        self._path = path
        self._backend = backend
        self._sha256 = sha256
        self._tiktoken_name = tiktoken_name
        self._threads = threads
        self._verify = verify
        self._pieces = None
        self._reference = None
        self.tokenizer: Tokenizer | None = None

    @property
    def backend(self) -> str:
        """The backend's name."""
        return self._backend

    def load(self) -> None:
        """Load the tokenizer and the engine (call once per worker, in DoFn.setup)."""
        tok = load_tokenizer(self._path, tiktoken_name=self._tiktoken_name, expected_sha256=self._sha256)
        try:
            engine = load_kind_engine(self._backend, tok, self._threads)
        except BackendUnavailable as e:
            raise RuntimeError(f"tokenizer backend {self._backend}, chosen by the driver, fails on this worker: "
                               f"{e}") from None
        self.tokenizer = tok
        reference = self._backend == REFERENCE[tok.kind]
        # The reference gets a long text's pieces one per call: a batch of several 256K-character
        # pieces measured ~13% more CPU than the same pieces one by one (the fast engines parallelize
        # a batch, so they keep theirs).
        self._pieces = BpePieceEncoder(engine, tok, **({"batch_chars": PIECE_CHARS} if reference else {}))
        self._verify = self._verify and not reference
        if self._verify:
            self._reference = BpePieceEncoder(ReferenceEngine(tok), tok, batch_chars=PIECE_CHARS)

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every text's ids (without BOS/EOS) in one int32 array, and offsets (text i: ids[offsets[i]:offsets[i+1]])."""
        if self._pieces is None:
            self.load()
        return self._pieces.encode(texts)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, without BOS/EOS."""
        ids, offsets = self.encode_flat(texts)
        return [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]

    def encode_verified(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """`encode_flat`, plus [(index, what differs)] for the texts whose ids differ from the reference's."""
        ids, offsets = self.encode_flat(texts)
        if not self._verify or not texts:
            return ids, offsets, []
        return ids, offsets, differences(self._backend, REFERENCE[self.tokenizer.kind], self._reference.encode(texts),
                                         (ids, offsets))

    def __getstate__(self):
        return {**self.__dict__, "_pieces": None, "_reference": None, "tokenizer": None}
