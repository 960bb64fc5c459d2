#!/usr/bin/env bash
# Debian packages the tests use, installed only when missing:
#   chromium  the browser tests (tests/browser/), via scripts/install-browser.sh
#   faketime  the clock-skew scenario of tests/reliability/ (a sweeper hours off)
#   pgbouncer the pooler in front of Dagster's database (tests/test_pgbouncer_instance.py
#             and the benchmark start their own, from deploy/pgbouncer/)
#   jq        1.6, and 1.7.1 built beside it (scripts/install-jq.sh): the operator
#             guide's jq lines run with both (tests/test_guide_jq.py)
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

if ! command -v faketime >/dev/null 2>&1; then
    echo "faketime missing: installing it with apt-get" >&2
    $SUDO apt-get update -q
    $SUDO apt-get install -y faketime
fi
bash scripts/install-pgbouncer.sh
bash scripts/install-jq.sh >/dev/null
bash scripts/install-browser.sh
bash scripts/install-iceberg-java.sh
# Iceberg's REST catalog server (tests/test_restore_rest.py registers a dropped table through it).
bash scripts/install-iceberg-rest.sh
# Polaris releases' own classes (tests/test_polaris_classes.py), those tests/polaris/releases lists.
bash scripts/install-polaris-classes.sh
bash scripts/install-storage-emulators.sh
