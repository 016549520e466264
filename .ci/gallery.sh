#!/usr/bin/env bash
# The samples gallery check: install headless Chromium + chromedriver (Debian packages), selenium and
# the page's npm dependencies, then open samples/index.html in the browser (tests/gallery). The page
# tests may not skip here; the screenshot lands in $SHAP_E_ARTIFACTS (default test-artifacts/gallery.png).
# Expects the project venv (.venv, made by .ci/run) or an active Python with the package installed.
# With --install-only it installs Chromium and the npm packages and stops (.ci/run does this first).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -q >/dev/null
  # Without the recommended packages: 26 instead of 132 (no printing, desktop or upower services).
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null
fi

# model-viewer (pinned in samples/package-lock.json) is served from samples/node_modules.
npm ci --silent --no-audit --no-fund --prefix samples >/dev/null
if [ "${1:-}" = "--install-only" ]; then exit 0; fi

if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
"$PYTHON" -c "import selenium" 2>/dev/null || "$PYTHON" -m pip install -q "selenium>=4.11"

export SHAP_E_ARTIFACTS="${SHAP_E_ARTIFACTS:-test-artifacts}"
SHAP_E_REQUIRE_BROWSER=1 "$PYTHON" -m pytest tests/gallery -q
echo "gallery screenshot: $SHAP_E_ARTIFACTS/gallery.png"
