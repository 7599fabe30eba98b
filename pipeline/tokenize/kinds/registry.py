"""Every kind of tokenizer file, one row each: the `Tokenizer` subclass that is the kind.

What a kind is and has (its detection, loading, engines, self-check strings, cuts and manifest
facts) is its class (kinds/base.py says what each attribute means); the engines themselves are
pipeline/tokenize/engines.py's table, by backend name; a file's kind and its loaded `Tokenizer`
are kinds/detect.py's, which asks every row. docs/extending.md says how to add a kind.
"""

from __future__ import annotations

from pipeline.tokenize.kinds.base import AUTO, Tokenizer
from pipeline.tokenize.kinds.hf_json import HuggingFaceTokenizer
from pipeline.tokenize.kinds.sp_model import SentencePieceTokenizer
from pipeline.tokenize.kinds.tiktoken_bpe import TiktokenTokenizer

__all__ = ["AUTO", "BACKENDS", "KINDS", "backends"]

KINDS: dict[str, type[Tokenizer]] = {
    kind.kind: kind for kind in (
        SentencePieceTokenizer,
        HuggingFaceTokenizer,
        TiktokenTokenizer,
    )
}


def backends(name: str) -> tuple[str, ...]:
    """The `--tokenizer_backend` values for a kind: its reference, its fast engines, auto."""
    if name not in KINDS:
        raise ValueError(f"unknown kind of tokenizer {name!r} (known: {', '.join(KINDS)})")
    return KINDS[name].backends


# Every --tokenizer_backend value, each kind's in its order (which apply depends on the kind).
BACKENDS = tuple(dict.fromkeys(b for row in KINDS.values() for b in row.backends))
