"""The eval sets of `--decontaminate`: their texts, each line checked, and the n-grams they hold.

An eval set is a JSON-lines file (plain, .gz, .zst; one object a line, its text at a key) or a
.txt file (one text, the whole file). Every line must be a JSON object holding a string at the
key, in valid UTF-8; anything else is an `EvalSetError` naming the file and the line. The command
reads every eval set once before the job (`check_eval_set`): a malformed one, or one without a
single n-gram (empty, or every text shorter than n words), would otherwise fail mid-job or
decontaminate nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import fsspec
import numpy as np
import zstandard

from pipeline.core import ngrams
from pipeline.io.urls import redact_url


class EvalSetError(ValueError):
    """An eval set that cannot be used: the message names the file (and the line)."""


def _is_text_file(path: str) -> bool:
    return ".txt" in path.rsplit("/", 1)[-1]


def eval_texts(path: str, text_key: str) -> Iterator[str]:
    """Every eval text of a file, in order; EvalSetError at the first line that is not one."""
    try:
        yield from _texts(path, text_key)
    except (OSError, EOFError, zstandard.ZstdError) as e:  # a damaged .gz or .zst
        raise EvalSetError(f"{redact_url(path)}: cannot be read ({type(e).__name__}: {str(e)[:200]})") from None


def _texts(path: str, text_key: str) -> Iterator[str]:
    shown = redact_url(path)
    with fsspec.open(path, "rb", compression="infer") as f:
        if _is_text_file(path):
            data = f.read()
            try:
                yield data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise EvalSetError(f"{shown}: not valid UTF-8 (byte {e.start})") from None
            return
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise EvalSetError(f"{shown} line {number}: not valid UTF-8 (byte {e.start})") from None
            except (ValueError, RecursionError) as e:
                raise EvalSetError(f"{shown} line {number}: not JSON ({str(e)[:100]})") from None
            if not isinstance(value, dict):
                raise EvalSetError(f"{shown} line {number}: a JSON {type(value).__name__}, not an object with a "
                                   f"{text_key!r} (--decontam_text_key)")
            if text_key not in value:
                raise EvalSetError(f"{shown} line {number}: no {text_key!r} (--decontam_text_key); its keys: "
                                   f"{', '.join(sorted(value)[:10])}")
            text = value[text_key]
            if not isinstance(text, str):
                raise EvalSetError(f"{shown} line {number}: {text_key!r} holds {type(text).__name__}, not a string")
            yield text


def eval_ngrams(path: str, text_key: str, n: int) -> np.ndarray:
    """Distinct hashes of the n-grams (lower-cased words) of every eval text of a file."""
    parts = []
    for text in eval_texts(path, text_key):
        tokens, _ = ngrams.word_spans(text)
        if len(tokens) >= n:
            parts.append(np.unique(ngrams.ngram_hashes(ngrams.word_hashes(tokens), n).astype(np.uint64)))
    return np.unique(np.concatenate(parts)) if parts else np.empty(0, np.uint64)


def check_eval_set(path: str, text_key: str, n: int) -> None:
    """Read an eval set through: EvalSetError for a malformed line, or when no text has `n` words."""
    texts = longest = 0
    for text in eval_texts(path, text_key):  # every line is checked, the words only until n are found
        texts += 1
        if longest < n:
            longest = max(longest, len(ngrams.word_spans(text)[0]))
    if longest >= n:
        return
    what = "no text" if not texts else f"{texts:,} text(s), the longest {longest} word(s)"
    raise EvalSetError(f"{redact_url(path)}: no {n}-word n-gram to decontaminate with ({what}); check the file "
                       "and --decontam_text_key, or lower --decontam_ngram")
