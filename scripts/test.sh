#!/usr/bin/env bash
# Set up .venv (and the Horovod training environment .venv-hvd), lint, and run the test suite.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/setup_env.sh
bash scripts/setup_horovod_env.sh
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/ruff check .
.venv/bin/python -m pytest "$@"
