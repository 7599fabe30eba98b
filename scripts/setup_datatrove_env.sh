#!/usr/bin/env bash
# Build the datatrove environment: a separate virtualenv (default: <repo>/.venv-datatrove) with
# Python 3.11, datatrove 0.10.1 and what its quality filters need, where the cleaning stages'
# tests run datatrove for real (scripts/bench/datatrove_filters.py) and compare its decisions with
# ours (tests/test_quality_filters.py), and scripts/bench/bench_filters.py times it.
#
# Why a separate environment: datatrove is a peer tool, not a dependency; its own pins must not
# move ours. Nothing of this repository is installed here.
#
# What its filters need beyond its base install: `regex` (datatrove.utils.text imports it; in its
# `processing` extra) and spaCy (its English word tokenizer is `spacy.blank("en")` with the
# sentencizer: in its `multilingual` extra, which pulls a dozen other tokenizers we do not use).
# spaCy's blank pipeline needs no model download. zstandard reads our corpora; orjson is what its
# JsonlReader parses lines with (tests/test_jsonl_cleaning.py reads our JSON-lines output). Its
# FastTextClassifierFilter needs fastText (fasttext-numpy2-wheel, the package it names) and its
# URLFilter tldextract (the same version as ours: the same Public Suffix List snapshot), pyahocorasick
# and fasteners (tests/test_classifier_parity.py, scripts/bench/datatrove_classifiers.py). Everything is
# pinned, so that the comparison is always against the same datatrove and the same spaCy as ours.
# Idempotent: with the pinned packages already importable it only checks them.
#
# Usage: bash scripts/setup_datatrove_env.sh [VENV_DIR]   (or DATATROVE_VENV=... bash ...)
# Env:   PYTHON (default python3.11), DATATROVE_FORCE=1 to rebuild from scratch.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${DATATROVE_VENV:-$REPO/.venv-datatrove}}"
PYTHON="${PYTHON:-python3.11}"
# datatrove 0.10.1 with spaCy 3.8.18 (the version in our constraints.txt) and their dependency set, frozen.
PINS=(
  "datatrove==0.10.1" "spacy==3.8.18" "regex==2026.11.19" "zstandard==0.25.0" "orjson==3.13.0"
  "annotated-doc==0.0.7" "annotated-types==0.8.0" "anyio==4.16.0" "blis==1.3.4" "catalogue==2.0.10"
  "certifi==2026.10.19.post1" "charset-normalizer==3.5.3" "click==8.5.1" "cloudpathlib==0.26.0"
  "confection==1.3.4" "cymem==2.0.16" "dill==0.4.1" "filelock==4.3.2" "fsspec==2026.9.0" "h11==0.16.0"
  "hf-xet==1.8.0" "httpcore==1.0.9" "httpx==0.29.0" "huggingface_hub==2.4.0" "humanize==4.17.0"
  "idna==3.20" "Jinja2==3.1.6" "loguru==0.7.3" "markdown-it-py==4.3.0" "MarkupSafe==3.0.4" "mdurl==0.1.2"
  "multiprocess==0.70.19" "murmurhash==1.0.16" "numpy==2.4.6" "packaging==26.4" "preshed==3.0.15"
  "pydantic==2.14.4" "pydantic_core==2.50.5" "Pygments==2.21.0" "PyYAML==6.0.4" "requests==2.34.2"
  "rich==15.0.0" "shellingham==1.5.4" "smart_open==9.0.4" "spacy-legacy==3.0.12" "spacy-loggers==1.0.5"
  "srsly==2.5.6" "thinc==8.3.14" "tqdm==4.70.1" "typer==0.29.2" "typing-inspection==0.4.5"
  "typing_extensions==4.16.0" "urllib3==2.8.0" "wasabi==1.1.3" "weasel==1.0.1" "wrapt==2.5.2"
  "fasttext-numpy2-wheel==0.9.2" "pybind11==3.1.0" "tldextract==5.4.0" "requests-file==3.0.1"
  "pyahocorasick==2.3.1" "fasteners==0.20"
)

log() { printf '[setup_datatrove_env] %s\n' "$*" >&2; }
# shellcheck source=scripts/venv_steps.sh
source "$REPO/scripts/venv_steps.sh"

check_env() {
  [[ -x "$VENV/bin/python" ]] || return 1
  "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
from importlib.metadata import version
assert version("datatrove") == "0.10.1", version("datatrove")
assert version("spacy") == "3.8.18", version("spacy")
assert version("tldextract") == "5.4.0", version("tldextract")
import orjson, zstandard
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.filters import C4QualityFilter, FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.filters import FastTextClassifierFilter, URLFilter
from datatrove.pipeline.formatters import PIIFormatter
import ahocorasick, fasteners, tldextract
from fasttext.FastText import _FastText
from datatrove.utils.text import split_into_words
assert split_into_words("It's a test.") == ["It", "'s", "a", "test", "."]
PY
}

if [[ "${DATATROVE_FORCE:-0}" != "1" ]] && check_env; then
  log "datatrove environment at $VENV is ready (datatrove 0.10.1, spaCy 3.8.18); skipping install"
  exit 0
fi
fresh_venv DATATROVE_FORCE
log "installing ${#PINS[@]} pinned packages (datatrove, spaCy)"
"$VENV/bin/pip" install --quiet "${PINS[@]}"
if ! check_env; then
  log "ERROR: the datatrove environment does not import; details:"
  "$VENV/bin/python" -c "import datatrove.pipeline.filters, spacy, zstandard, orjson" || true
  exit 1
fi
log "done: $VENV"
