"""A SentencePiece `.model` as a `Tokenizer`: the reference is SentencePiece itself.

The job's SentencePiece path (pipeline/tokenize/model.py, engines.py, pieces.py) stays its own;
this gives the same facts through the interface every kind shares (detection, the manifest's
description, reference ids and decoding for `show` and `provenance`).
"""

from __future__ import annotations

import hashlib

import numpy as np
import sentencepiece as spm

from pipeline.core import versions
from pipeline.tokenize.kinds.base import SENTENCEPIECE, Tokenizer, TokenizerFileError, flatten


def looks_like(data: bytes) -> bool:
    """Whether the bytes start like a serialized ModelProto: field 1 (a piece message), length-delimited."""
    return len(data) > 2 and data[0] == 0x0A


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model; `encode` runs SentencePiece on each text (threads: all cores)."""

    kind = SENTENCEPIECE

    def __init__(self, path: str, proto: bytes):
        self.path = path
        self.proto = proto
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(proto)
        except Exception as e:  # sentencepiece raises RuntimeError/OSError variants
            raise TokenizerFileError(f"{path} is not a SentencePiece model: {e}") from None
        self.sha256 = hashlib.sha256(proto).hexdigest()
        self.files = {path.rstrip("/").rsplit("/", 1)[-1]: self.sha256}
        sp = self._sp
        self.vocab_size = sp.get_piece_size()
        self.bos_id, self.eos_id, self.pad_id, self.unk_id = sp.bos_id(), sp.eos_id(), sp.pad_id(), sp.unk_id()
        self.special_sources = {k: "model" for k, v in (("bos", self.bos_id), ("eos", self.eos_id),
                                                          ("pad", self.pad_id), ("unk", self.unk_id)) if v >= 0}
        self.special_tokens = {sp.id_to_piece(i): i for i in range(self.vocab_size) if sp.is_control(i)}

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The reference (ids, offsets) of the texts."""
        return flatten(self._sp.encode(list(texts)) if texts else [])

    def decode(self, ids) -> str:
        """The text of some ids."""
        return self._sp.decode([int(i) for i in ids])

    def versions(self) -> dict[str, str]:
        """The owning library and its version."""
        return {"sentencepiece": versions.package_version("sentencepiece") or spm.__version__}
