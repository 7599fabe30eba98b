"""The job's tokenizer: which file, the document boundaries' ids, which engine: `TokenizerOptions`.

The file's kind, hash and ids are recorded by the manifest's `tokenizer` entry (the model itself is
read in the driver: pipeline/tokenize/model.py); here only the location and the policy the job applies.
Only `--output_format jsonl` runs without a tokenizer (pipeline/config/job.py): then none of these
options is recorded.
"""

from __future__ import annotations

import dataclasses
import os

from pipeline.core.option_groups import OptionGroup
from pipeline.core.options import Bounds, option
from pipeline.io.urls import is_local_url, redact_url
from pipeline.tokenize.kinds.base import MAX_TOKEN_ID
from pipeline.tokenize.kinds.registry import BACKENDS, KINDS

VERIFY_TOKENIZER_MODES = ("off", "dead_letter", "fail")
# --tokenizer_backend's choices are every kind's; which apply depends on the kind (pipeline/beam/preflight.py).
_REFERENCES = [kind.reference for kind in KINDS.values()]
_FAST = "; ".join(f"{', '.join(kind.fast)} ({kind.label})" for kind in KINDS.values() if kind.fast)
TOKEN_ID_BOUNDS = Bounds(0, MAX_TOKEN_ID, why="the records hold ids as int32",
                         low_why="a token id is >= 0 (leave the flag out to use the model's)")


def recorded_location(path: str) -> str:
    """A location as the manifest records it: a local path absolute (`show` finds it from anywhere), a URL redacted."""
    if "://" not in path and is_local_url(path) and path:
        return os.path.abspath(os.path.expanduser(path))
    return redact_url(path)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizerOptions(OptionGroup):
    """--tokenizer_model and what the job does with it: BOS/EOS, their ids, the engine and its verification."""

    title = "tokenizer"

    tokenizer_model: str | None = option(
        None, help="the tokenizer, its kind read from the file: a SentencePiece .model (Llama-2's tokenizer.model), a "
        "Hugging Face tokenizer.json or a directory holding one (GPT-NeoX-20B, Llama-3), or a tiktoken BPE ranks "
        "file with its pattern and specials in <file>.json or --tiktoken_encoding (docs/tokenizers.md); "
        "required but for --output_format jsonl, which then writes text without tokenizing",
        metavar="FILE", record=recorded_location, shown_default="none")
    # Recorded by the manifest's `tokenizer` (its encoding, pattern and pad id), not in `config`.
    tiktoken_encoding: str | None = option(
        None, recorded=False, metavar="NAME", shown_default="the JSON beside the ranks file",
        help="a tiktoken ranks file's built-in split pattern and special tokens: cl100k_base, o200k_base, llama3, "
        "r50k_base (the ranks are still read from --tokenizer_model; nothing is downloaded)")
    add_bos: bool = option(False, help="BOS before every document (the model's id, or --bos_id)")
    add_eos: bool = option(True, help="EOS after every document (the model's id, or --eos_id)")
    bos_id: int | None = option(None, shown_default="the model's", bounds=TOKEN_ID_BOUNDS,
                                help="BOS id instead of the model's")
    eos_id: int | None = option(None, shown_default="the model's", bounds=TOKEN_ID_BOUNDS,
                                help="EOS id instead of the model's")
    allow_text_eos: bool = option(False, recorded=False,
                                  help="let --eos_id / --bos_id name an ordinary token, which text produces too (a "
                                  "model without a special one); by default only special/control tokens are taken")
    pad_id: int | None = option(None, recorded=False, shown_default="the model's, else the separator",
                                bounds=TOKEN_ID_BOUNDS, help="id of padded positions instead of the model's")
    tokenizer_backend: str | None = option(
        None, choices=BACKENDS,
        shown_default="the kind's own library: " + ", ".join(_REFERENCES[:-1]) + " or " + _REFERENCES[-1],
        help=f"auto or a fast engine, used only when its ids equal the kind's own library's: {_FAST}")
    verify_tokenizer: str = option(
        "off", choices=VERIFY_TOKENIZER_MODES, const="dead_letter",
        help="also run the reference (the kind's own library) on every document and dead-letter (or fail on) "
        "any mismatch")

    def recorded_when(self) -> bool:
        """Recorded when the job has a tokenizer (a JSON-lines job may have none)."""
        return self.tokenizer_model is not None
