#!/usr/bin/env bash
# Build the Megatron environment: a separate virtualenv (default: <repo>/.venv-megatron) with
# Python 3.11, a CPU build of torch and megatron-core, where Megatron's own reader checks the
# pipeline's Megatron output (tests/megatron_check.py, tests/test_megatron_compat.py).
#
# Why a separate environment: megatron-core needs torch, and the pipeline's .venv (TensorFlow,
# Beam) must not carry a second framework. Nothing of this repository is installed here: the
# check imports only Megatron, SentencePiece and numpy, so it sees our files as Megatron does.
#
# torch is pinned to its CPU build (`+cpu`): a plain `torch` would pull the CUDA build (several GB).
# megatron-core's wheel ships its C++ dataset helpers compiled, so nothing is built here.
# Idempotent: with the pinned packages already importable it only checks them.
#
# --with-tools: also what Megatron-LM's tools/preprocess_data.py imports when run from a checkout
# (six, regex, PyYAML, pydantic, triton and transformers, ~1 GB): for scripts/bench/bench_megatron.py and the
# preprocess_data comparison (MEGATRON_LM=<checkout> pytest tests/test_megatron_compat.py). CI
# does not need them.
#
# Usage: bash scripts/setup_megatron_env.sh [--with-tools] [VENV_DIR]   (or MEGATRON_VENV=... bash ...)
# Env:   PYTHON (default python3.11), MEGATRON_FORCE=1 to rebuild from scratch.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1

TOOLS=0
if [[ "${1:-}" == "--with-tools" ]]; then
  TOOLS=1
  shift
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${MEGATRON_VENV:-$REPO/.venv-megatron}}"
PYTHON="${PYTHON:-python3.11}"
# megatron-core 0.16.1 = Megatron-LM tag core_v0.16.1; the rest is its dependency set, frozen.
PINS=(
  "torch==2.13.0+cpu" "megatron-core==0.16.1" "numpy==2.4.6" "packaging==26.4"
  "sentencepiece==0.2.3" "zstandard==0.25.0"
  "filelock==4.3.1" "fsspec==2026.9.0" "Jinja2==3.1.6" "MarkupSafe==3.0.4" "mpmath==1.3.0"
  "networkx==3.6.1" "sympy==1.14.0" "typing_extensions==4.16.0"
)
TOOL_PINS=(
  "six==1.17.0" "regex==2026.11.19" "PyYAML==6.0.4" "triton==3.9.0"
  "pydantic==2.14.4" "pydantic_core==2.50.5" "annotated-types==0.8.0" "typing-inspection==0.4.5"
  # --tokenizer-type HuggingFaceTokenizer (scripts/bench/bench_tokenizer_kinds.py) loads it with transformers.
  "transformers==4.57.6" "huggingface_hub==0.36.2" "tokenizers==0.22.2" "safetensors==0.8.0" "hf-xet==1.8.0"
  "tqdm==4.70.1" "requests==2.34.2" "certifi==2026.10.19.post1" "charset-normalizer==3.5.3" "idna==3.20"
  "urllib3==2.8.0"
)

log() { printf '[setup_megatron_env] %s\n' "$*" >&2; }
# shellcheck source=scripts/venv_steps.sh
source "$REPO/scripts/venv_steps.sh"

check_env() {
  [[ -x "$VENV/bin/python" ]] || return 1
  "$VENV/bin/python" - "$TOOLS" <<'EOF' >/dev/null 2>&1
import sys, warnings
warnings.filterwarnings("ignore")
import torch
assert torch.__version__ == "2.13.0+cpu", torch.__version__
from importlib.metadata import version
assert version("megatron-core") == "0.16.1"
import sentencepiece, zstandard
from megatron.core.datasets import helpers_cpp  # the compiled helpers GPTDataset uses
from megatron.core.datasets.gpt_dataset import GPTDataset
if sys.argv[1] == "1":
    import six, regex, yaml, pydantic, triton, transformers
EOF
}

if [[ "${MEGATRON_FORCE:-0}" != "1" ]] && check_env; then
  log "megatron environment at $VENV is ready (torch 2.13.0+cpu, megatron-core 0.16.1); skipping install"
  exit 0
fi
fresh_venv MEGATRON_FORCE
PACKAGES=("${PINS[@]}")
if [[ "$TOOLS" == "1" ]]; then
  PACKAGES+=("${TOOL_PINS[@]}")
fi
log "installing ${#PACKAGES[@]} pinned packages (torch's CPU build, megatron-core)"
"$VENV/bin/pip" install --quiet "${PACKAGES[@]}"
if ! check_env; then
  log "ERROR: the megatron environment does not import; details:"
  "$VENV/bin/python" -c "import torch, megatron.core.datasets.gpt_dataset" || true
  exit 1
fi
log "done: $VENV"
