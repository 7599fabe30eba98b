#!/usr/bin/env bash
# A headless browser for the report's browser tests (tests/test_inspect_report.py, tests/test_inspect_hostile.py,
# driven by tests/browser.py): Debian's chromium, installed with apt where this machine allows it (root and
# apt-get, as on CI's bare Debian machine). Says plainly when it cannot; scripts/test.sh then fails those
# tests (PILE_REQUIRE_BROWSER=1) instead of skipping them.
set -euo pipefail
found() {
  for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null; then
      echo "setup_browser: $(command -v "$name"): $("$name" --version 2>/dev/null || echo 'version unknown')"
      return 0
    fi
  done
  return 1
}
found && exit 0
if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  found && exit 0
fi
echo "setup_browser: NO BROWSER: chromium is not installed and cannot be installed here (needs root and apt-get:" \
     "apt-get install chromium); the report is not checked in a browser, and under scripts/test.sh its browser" \
     "tests fail" >&2
