# Sourced by scripts/setup_horovod_env.sh and scripts/setup_megatron_env.sh: the steps both take to
# make their separate virtualenv. The caller sets VENV and PYTHON and defines log().

# fresh_venv FORCE_VAR: a virtualenv at $VENV made with $PYTHON, removed first when $FORCE_VAR is 1.
fresh_venv() {
  local force_var="$1"
  command -v "$PYTHON" >/dev/null || { log "ERROR: $PYTHON not found (Python 3.11 is required)"; exit 1; }
  if [[ "${!force_var:-0}" == "1" && -d "$VENV" ]]; then
    log "$force_var=1: removing $VENV"
    rm -rf "$VENV"
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating virtualenv $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
  fi
}
