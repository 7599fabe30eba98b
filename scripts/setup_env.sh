#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment at .venv with every extra (the pipeline, the
# reader, cloud I/O, the fast tokenizer backends, the report) and the test tools, at the versions of
# constraints.txt. EXTRAS=pipeline,reader,tokenizers installs only those extras (what scripts/quickstart.sh
# needs); a later run without it adds the rest. Idempotent; needs only Python 3.11 and PyPI.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 needed, got {sys.version}"'
if [[ ! -x "$REPO/.venv/bin/python" ]]; then
  "$PYTHON" -m venv "$REPO/.venv"
fi
"$REPO/.venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip wheel
"$REPO/.venv/bin/pip" install --quiet --disable-pip-version-check -c "$REPO/constraints.txt" -e "$REPO[${EXTRAS:-dev}]"
