"""Every kind of tokenizer file, one row each: what the rest of the pipeline asks of a kind.

A row names the kind's reference engine (the owning library's own encode: the default and what a
fast engine is checked against), its fast engines (`fast`, in the order `--help` lists them, and
`auto`, in the order `auto` tries them: fastest first), where its very long texts may be cut
(`cuts`), the strings the self-check puts in text (`check_strings`), what a fast engine is known
to get wrong before it is loaded (`engine_problems`), the tokenizer.json gigatoken loads
(`gigatoken_json`) and its description for the manifest (`manifest_facts`). The engines themselves
are pipeline/tokenize/engines.py's table, by backend name; the loaded `Tokenizer` of a file is
kinds/detect.py's. docs/development.md says how to add a kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from pipeline.tokenize.kinds import byte_level, sp_model
from pipeline.tokenize.kinds.base import HUGGINGFACE, SENTENCEPIECE, TIKTOKEN, CutRules, Tokenizer

AUTO = "auto"


def _no_problems(backend: str, tokenizer: Tokenizer) -> list[str]:
    return []


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of tokenizer file (see the module docstring)."""

    name: str
    reference: str  # the --tokenizer_backend of the owning library's own encode
    reference_name: str  # how messages name the reference ("ids different from SentencePiece's")
    fast: tuple[str, ...]  # the fast engines, as --help lists them
    auto: tuple[str, ...]  # the fast engines `auto` tries, in order
    cuts: CutRules
    check_strings: Callable[[Tokenizer], Sequence[str]]
    manifest_facts: Callable[[Tokenizer], dict | None]
    engine_problems: Callable[[str, Tokenizer], list[str]] = _no_problems
    gigatoken_json: Callable[[Tokenizer], str] | None = None

    @property
    def backends(self) -> tuple[str, ...]:
        """The `--tokenizer_backend` values for this kind: its reference, its fast engines, auto."""
        return (self.reference, *self.fast, AUTO)


KINDS = {
    SENTENCEPIECE: Kind(
        SENTENCEPIECE, reference="sentencepiece", reference_name="SentencePiece",
        # gigatoken is ~13x SentencePiece per core, kitoken ~5-7x (docs/backends.md).
        fast=("gigatoken", "kitoken"), auto=("gigatoken", "kitoken"),
        cuts=sp_model.CUT_RULES, check_strings=sp_model.check_strings,
        manifest_facts=lambda tokenizer: None,  # a .model's entry is the ids and sha256 alone, as it always was
        engine_problems=sp_model.engine_problems, gigatoken_json=sp_model.gigatoken_json),
    HUGGINGFACE: Kind(
        HUGGINGFACE, reference="tokenizers", reference_name="tokenizers",
        # gigatoken's per-call word cache makes it many times `tokenizers`' encode per core on real text, the
        # library's batch encode a little faster (scripts/bench/bench_tokenizer_kinds.py).
        fast=("tokenizers_batch", "gigatoken"), auto=("gigatoken", "tokenizers_batch"),
        cuts=byte_level.CUT_RULES, check_strings=byte_level.check_strings,
        manifest_facts=byte_level.manifest_facts, gigatoken_json=byte_level.gigatoken_json),
    TIKTOKEN: Kind(
        TIKTOKEN, reference="tiktoken", reference_name="tiktoken", fast=("tiktoken_batch",), auto=("tiktoken_batch",),
        cuts=byte_level.CUT_RULES, check_strings=byte_level.check_strings,
        manifest_facts=byte_level.manifest_facts),
}


def backends(name: str) -> tuple[str, ...]:
    """The `--tokenizer_backend` values for a kind: its reference, its fast engines, auto."""
    if name not in KINDS:
        raise ValueError(f"unknown kind of tokenizer {name!r} (known: {', '.join(KINDS)})")
    return KINDS[name].backends


# Every --tokenizer_backend value, each kind's in its order (which apply depends on the kind).
BACKENDS = tuple(dict.fromkeys(b for row in KINDS.values() for b in row.backends))
