#!/usr/bin/env bash
# The other supported Pythons (3.11 is .venv's): for each of 3.10, 3.12 and 3.13, a virtualenv
# .venv-py3.X with the reader (`.[reader]` + pytest, at constraints.txt's versions) and the reader's
# tests; on $PIPELINE_PYTHON (3.12) also the job (`.[pipeline]`) and the pinned-output test, which
# runs the job on the bundled corpus and compares every byte with what 3.11 wrote.
#
# Interpreters are looked up as python3.X on PATH, then under `pyenv root`. Debian 12's apt has
# only python3.11, and no interpreter downloads are reachable (only the package registries), so a
# machine without pyenv cannot test the other versions: each one missing, or whose packages pip
# cannot install (no wheel for it, no registry), is printed as NOT TESTED, and the script still
# exits 0 (REQUIRE_ALL_PYTHONS=1 makes that fail). A failing test fails the script.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VERSIONS="${PYTHONS:-3.10 3.12 3.13}"
PIPELINE_PYTHON="${PIPELINE_PYTHON:-3.12}"
# The reader's tests that need no Beam or SentencePiece, less test_tfdata.py's many world sizes (minutes
# on two cores): its import, shape, checkpoint and int32 checks stand for it.
READER_TESTS=(tests/test_tfdata_keras.py tests/test_records.py tests/test_reader_order.py
  tests/test_tfdata.py::test_imports_without_beam_or_sentencepiece
  tests/test_tfdata.py::test_batches_have_static_shapes_and_the_written_tokens
  tests/test_tfdata.py::test_resume_with_tf_train_checkpoint
  tests/test_tfdata.py::test_int32_tokens)
PIP=(--quiet --disable-pip-version-check)
export TF_CPP_MIN_LOG_LEVEL=2

log() { echo "[test_pythons] $*"; }

find_python() {  # find_python 3.X: prints a working interpreter's path, or nothing
  local v="$1" candidate root candidates=()
  candidate="$(command -v "python$v" || true)"
  [[ -n "$candidate" ]] && candidates+=("$candidate")
  if command -v pyenv >/dev/null && root="$(pyenv root 2>/dev/null)"; then
    candidates+=("$root"/versions/"$v".*/bin/"python$v")
  fi
  for candidate in "${candidates[@]}"; do
    # A pyenv shim is on PATH for every version but runs only the selected ones.
    if [[ -x "$candidate" ]] && "$candidate" -c 'import venv' >/dev/null 2>&1; then
      echo "$candidate"; return
    fi
  done
}

missing=()
for v in $VERSIONS; do
  py="$(find_python "$v")"
  if [[ -z "$py" ]]; then
    log "Python $v: NOT TESTED: no python$v on PATH$(command -v pyenv >/dev/null && echo " nor in $(pyenv root)/versions" || echo ", and no pyenv on this machine")"
    missing+=("$v")
    continue
  fi
  venv="$REPO/.venv-py$v"
  log "Python $v ($py): reader in $venv"
  [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
  if ! "$venv/bin/pip" install "${PIP[@]}" -c constraints.txt ".[reader]" pytest pytest-timeout 2>"$venv/pip.log"; then
    log "Python $v: NOT TESTED: the reader's packages cannot be installed here (no wheel, or no registry):"
    grep -v "^WARNING: Location" "$venv/pip.log" | tail -3 | sed 's/^/[test_pythons]   /'
    missing+=("$v")
    continue
  fi
  # The repository's own package, not the installed copy: the tests import from the checkout.
  "$venv/bin/python" -m pytest --noconftest -q -p no:cacheprovider "${READER_TESTS[@]}"
  if [[ "$v" == "$PIPELINE_PYTHON" ]]; then
    log "Python $v: the job (.[pipeline]) and the pinned output"
    "$venv/bin/pip" install "${PIP[@]}" -c constraints.txt ".[reader,pipeline]"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_output_pinned.py
  fi
done
if (( ${#missing[@]} )); then
  log "NOT TESTED on this machine: Python ${missing[*]} (see above)"
  [[ "${REQUIRE_ALL_PYTHONS:-0}" == "1" ]] && exit 1
fi
log "done"
