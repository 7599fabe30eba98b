"""What each worker encodes with: `Encoder`, built from the job's `TokenizerSpec` (pipeline/tokenize/model.py).

An Encoder pickles as its settings (location, sha256, backend, verify, threads) and loads in the
worker's `DoFn.setup()`: the tokenizer from its location (refusing one whose sha256 is not the one
the driver checked), the engine the driver chose (engines.py), long documents in pieces
(pieces.py) and, with `verify`, the kind's reference on every document. What is derived from a
tokenizer alone (a model's facts, its converted form, which cuts keep the ids) is computed once per
process; `derived` and `adopt` carry it from the self-check's process to the driver's
(pipeline/startup/early_check.py), so that DirectRunner's worker threads find it done.
"""

from __future__ import annotations

import numpy as np

from pipeline.tokenize import pieces
from pipeline.tokenize.engines import BackendUnavailable, differences, load_engine
from pipeline.tokenize.kinds import sp_model
from pipeline.tokenize.kinds.base import Tokenizer
from pipeline.tokenize.kinds.detect import load_tokenizer
from pipeline.tokenize.kinds.registry import KINDS
from pipeline.tokenize.pieces import PieceEncoder


class Encoder:
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
        self._engine = None
        self._pieces = None  # the engine, encoding long documents in pieces
        self._reference = None
        self._reference_name = None
        self.tokenizer: Tokenizer | None = None

    @property
    def backend(self) -> str:
        """The backend's name."""
        return self._backend

    def load(self, tokenizer: Tokenizer | None = None) -> None:
        """Load the tokenizer and the engine (once per worker, in DoFn.setup); `tokenizer`: when already loaded."""
        tok = tokenizer or load_tokenizer(self._path, tiktoken_name=self._tiktoken_name, expected_sha256=self._sha256)
        try:
            engine = load_engine(self._backend, tok, self._threads)
        except BackendUnavailable as e:
            # The driver checked this backend; a worker without it must not quietly use another.
            raise RuntimeError(f"tokenizer backend {self._backend}, chosen by the driver, fails on this worker: "
                               f"{e}") from None
        row = KINDS[tok.kind]
        # Documents over ~1 MB are encoded in pieces with the same ids: memory stays bounded.
        self.tokenizer, self._engine, self._pieces = tok, engine, PieceEncoder(engine, tok)
        self._verify = self._verify and self._backend != row.reference
        if self._verify:
            self._reference = PieceEncoder(load_engine(row.reference, tok, self._threads), tok)
            self._reference_name = row.reference_name

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
        """`encode_flat`, plus [(index, what differs)] for the texts whose ids differ from the reference's.

        Without verification (or with the reference itself) the list is always empty.
        """
        ids, offsets = self.encode_flat(texts)
        if not self._verify or not texts:
            return ids, offsets, []
        return ids, offsets, differences(self._backend, self._reference_name, self._reference.encode(texts),
                                         (ids, offsets))

    def __getstate__(self):
        return {**self.__dict__, "_engine": None, "_pieces": None, "_reference": None, "tokenizer": None}


def derived() -> dict:
    """What this process derived from tokenizers (a model's facts and converted form, safe cuts), for `adopt`."""
    return {**sp_model.derived(), "cuts": pieces.CUTS.items()}


def adopt(items: dict) -> None:
    """Take what another process derived from tokenizers as this one's."""
    sp_model.adopt(items)
    pieces.CUTS.adopt(items["cuts"])
