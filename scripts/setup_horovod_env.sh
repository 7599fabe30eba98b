#!/usr/bin/env bash
# Build the Horovod training environment: a separate virtualenv (default: <repo>/.venv-hvd) with
# Python 3.11, tensorflow-cpu 2.15.1 and Horovod 0.28.1 built from source with Gloo (no MPI).
#
# Why a separate environment: Horovod 0.28.1 (its last release) does not build against
# TensorFlow 2.21 (missing XLA/highwayhash/farmhash headers); it does build against 2.15.1. The
# reader (pipeline.tfdata) and the trainers (trainers/) work on both; the main .venv keeps TF 2.21.
#
# Idempotent: if the environment already imports horovod.tensorflow with the pinned versions it
# only refreshes the editable install of this repo (cheap) and exits. The first build takes several
# minutes on 2 cores; pip's wheel cache (~/.cache/pip) makes later builds take seconds.
#
# Usage: bash scripts/setup_horovod_env.sh [VENV_DIR]        (or HVD_VENV=... bash ...)
# Env:   PYTHON (default python3.11), HVD_FORCE=1 to rebuild from scratch.
set -euo pipefail
export PIP_DISABLE_PIP_VERSION_CHECK=1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${HVD_VENV:-$REPO/.venv-hvd}}"
PYTHON="${PYTHON:-python3.11}"
TF_PIN="tensorflow-cpu==2.15.1"
HVD_PIN="horovod==0.28.1"
# The few pure dependencies the reader and the trainers need at run time (no Beam, no zstd):
# pipeline.manifest uses fsspec; TF 2.15 needs numpy < 2. pytest lets the trainer unit tests run on
# TF 2.15 / Keras 2 too: .venv-hvd/bin/python -m pytest --noconftest tests/test_model.py
RUNTIME_DEPS=("numpy>=1.26,<2" "fsspec>=2025.1.0" "pytest>=8" "pytest-timeout>=2.3")
# Build requirements of Horovod under --no-build-isolation (cmake >= 3.13 from PyPI, so the build
# does not depend on the machine's cmake).
BUILD_DEPS=("pip>=24" "setuptools>=69,<81" "wheel" "cmake>=3.13,<4" "packaging")

log() { printf '[setup_horovod_env] %s\n' "$*" >&2; }
# shellcheck source=scripts/venv_steps.sh
source "$REPO/scripts/venv_steps.sh"

check_env() {
  # Succeeds only when the venv has the pinned TF and a Horovod that was built with TF + Gloo.
  [[ -x "$VENV/bin/python" ]] || return 1
  "$VENV/bin/python" - <<'EOF' >/dev/null 2>&1
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
assert tf.__version__ == "2.15.1", tf.__version__
import horovod
assert horovod.__version__ == "0.28.1", horovod.__version__
import horovod.tensorflow as hvd
assert hvd.gloo_built(), "horovod was built without gloo"
EOF
}

install_repo() {
  # The repo itself, without its heavy dependencies (Beam, TF 2.21, ...): only its import path.
  log "installing this repo (editable, --no-deps) into $VENV"
  if ! "$VENV/bin/pip" install --quiet --no-deps --no-build-isolation -e "$REPO" >"$VENV/repo-install.log" 2>&1; then
    cat "$VENV/repo-install.log" >&2
    exit 1
  fi
}

if [[ "${HVD_FORCE:-0}" != "1" ]] && check_env; then
  log "horovod environment at $VENV is ready (tensorflow-cpu 2.15.1, horovod 0.28.1, gloo); skipping build"
  "$VENV/bin/pip" install --quiet "${RUNTIME_DEPS[@]}"
  install_repo
  exit 0
fi

command -v g++ >/dev/null || { log "ERROR: g++ not found: Horovod builds from source (apt-get install g++)"; exit 1; }
fresh_venv HVD_FORCE

log "installing build requirements and $TF_PIN"
"$VENV/bin/pip" install --quiet "${BUILD_DEPS[@]}"
"$VENV/bin/pip" install --quiet "$TF_PIN" "${RUNTIME_DEPS[@]}"

log "building $HVD_PIN against $TF_PIN with Gloo (several minutes on 2 cores the first time)"
BUILD_LOG="$VENV/horovod-build.log"
# cmake from the venv comes first on PATH; the TF headers come from the installed tensorflow-cpu.
if ! PATH="$VENV/bin:$PATH" \
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  "$VENV/bin/pip" install --no-build-isolation "$HVD_PIN" >"$BUILD_LOG" 2>&1; then
  log "ERROR: building $HVD_PIN failed; last lines of $BUILD_LOG:"
  tail -n 40 "$BUILD_LOG" >&2
  exit 1
fi

install_repo

if ! check_env; then
  log "ERROR: horovod did not import after the build; details:"
  "$VENV/bin/python" -c "import horovod.tensorflow as hvd; print(hvd.gloo_built())" || true
  exit 1
fi
TF_CPP_MIN_LOG_LEVEL=3 "$VENV/bin/horovodrun" --check-build >&2
log "done: $VENV (run trainers with $VENV/bin/horovodrun -np 2 -H localhost:2 --gloo ...)"
