#!/usr/bin/env bash
# Start the local services the tests need when they are down (PostgreSQL only, for now).
set -euo pipefail

if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    echo "starting PostgreSQL" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
    for _ in $(seq 1 30); do
        pg_isready -h 127.0.0.1 -p 5432 -q && break
        sleep 1
    done
fi
pg_isready -h 127.0.0.1 -p 5432
