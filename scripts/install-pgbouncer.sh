#!/usr/bin/env bash
# pgbouncer, the pooler in front of Dagster's database, installed only when missing:
# tests/test_pgbouncer_instance.py (part of `make test-fast`) and the benchmark start
# their own from deploy/pgbouncer/. Debian's package also enables a system-wide
# service; only the binary is used here.
set -euo pipefail

if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
echo "pgbouncer missing: installing it with apt-get" >&2
$SUDO apt-get update -q
$SUDO apt-get install -y -q pgbouncer
