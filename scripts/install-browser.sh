#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests (tests/browser/), only when it is missing.
# The tests drive /usr/bin/chromium with the Python `playwright` package
# (executable_path), so no browser is ever downloaded: never run `playwright install`.
# Usage: bash scripts/install-browser.sh   (CI runs it before `make test`)
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ] && "$CHROMIUM" --version >/dev/null 2>&1; then
    echo "chromium present: $("$CHROMIUM" --version 2>/dev/null)" >&2
    exit 0
fi

echo "chromium missing: installing it with apt-get" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y chromium
"$CHROMIUM" --version 2>/dev/null
