#!/usr/bin/env bash
# Set up .venv (and the Horovod training environment .venv-hvd, the Megatron one .venv-megatron, the
# datatrove one .venv-datatrove), lint,
# test the other Pythons (scripts/test_pythons.sh), and run the test suite: everything on TF 2.21 in
# .venv, then the model and trainer tests again on TF 2.15 in .venv-hvd; tests/test_megatron_compat.py
# reads our Megatron output in .venv-megatron; tests/test_quality_filters.py runs datatrove's filters in
# .venv-datatrove beside ours; the report's pages are opened in headless Chromium (scripts/setup_browser.sh).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/setup_env.sh
bash scripts/setup_horovod_env.sh
bash scripts/setup_megatron_env.sh
bash scripts/setup_datatrove_env.sh
# A headless Chromium for the report's browser tests (it says plainly when it cannot install one).
bash scripts/setup_browser.sh
export TF_CPP_MIN_LOG_LEVEL=2
# Parity tests of the fast tokenizer backends must run, not skip, wherever the suite runs.
export PILE_REQUIRE_FAST_BACKENDS=1
# The report's pages must be opened in a real browser here: without one those tests fail, not skip.
export PILE_REQUIRE_BROWSER=1
.venv/bin/ruff check .
# .[dev] holds every extra; the dask one's tests (tests/test_dask_runner.py) start a real cluster and must run.
.venv/bin/python -c "import dask, distributed" || { echo "scripts/test.sh: .venv lacks the dask extra" >&2; exit 2; }
# --noconftest: the shared conftest needs sentencepiece/zstandard, which the training env lacks.
.venv-hvd/bin/python -m pytest --noconftest -q -p no:cacheprovider tests/test_model.py tests/test_trainers.py
# The reader on Python 3.10, 3.12 and 3.13 and the job on 3.12, where this machine has them (it says
# plainly which it has not).
bash scripts/test_pythons.sh
# Two test processes (PYTEST_WORKERS=0: one): most tests wait on subprocesses or I/O part of the time.
# Both tiers: the fast one alone, the contributor's loop, is `.venv/bin/python -m pytest -m "not slow" -n 2`;
# the slow one (-m slow) runs Beam pipelines, other processes and servers (docs/development.md).
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" "$@"
