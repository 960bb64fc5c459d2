#!/usr/bin/env bash
# The local services the tests need, on a machine that may have none of them:
#   PostgreSQL 15 127.0.0.1:5432  the metastore, Dagster's storage and each real Polaris's database
#   RabbitMQ      127.0.0.1:5672  the Celery broker of the scale-out test (tests/test_celery_executor.py)
#
# What it does to the machine, each step only when it is not done yet (a second run changes nothing):
#   - installs Debian's postgresql-15 and rabbitmq-server with apt-get when they are missing
#     (the packages' own services are not used: no systemd here; this script starts both);
#   - creates the cluster 15/main when the package left none;
#   - lets the user `postgres` connect from 127.0.0.1 and ::1 without a password (`trust`
#     lines in pg_hba.conf, above the package's own rules; every other user keeps its
#     password check) and raises max_connections to 300 (conf.d/polaris-pipeline.conf):
#     the parallel suite's daemons, code servers and Polaris servers hold many connections;
#   - starts PostgreSQL and RabbitMQ when they are down, and waits until both answer.
set -euo pipefail

PG_VERSION=15
PG_CONF_DIR=/etc/postgresql/$PG_VERSION/main
PG_MARK="# polaris-pipeline: the tests' superuser connects over loopback without a password"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

wait_for() { # wait_for <what> <seconds> <command...>: true once the command succeeds
    local what=$1 seconds=$2
    shift 2
    for _ in $(seq 1 "$seconds"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "$what did not come up within ${seconds} s" >&2
    return 1
}

tcp_open() { # tcp_open <port>: something listens on 127.0.0.1:<port>
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

apt_updated=0
apt_install() { # apt_install <package...>: one `apt-get update` per run, then install
    if [ "$apt_updated" -eq 0 ]; then
        $SUDO apt-get update -q
        apt_updated=1
    fi
    # policy-rc.d 101: the packages' postinst must not try to start services through
    # invoke-rc.d (no init system here); this script starts them itself.
    local policy=/usr/sbin/policy-rc.d had_policy=1
    [ -e "$policy" ] || had_policy=0
    if [ "$had_policy" -eq 0 ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod +x "$policy"
    fi
    local status=0
    $SUDO apt-get install -y -q "$@" || status=$?
    [ "$had_policy" -eq 1 ] || $SUDO rm -f "$policy"
    return "$status"
}

# --- PostgreSQL -------------------------------------------------------------------------
if [ ! -x "/usr/lib/postgresql/$PG_VERSION/bin/postgres" ]; then
    echo "PostgreSQL $PG_VERSION missing: installing postgresql-$PG_VERSION with apt-get" >&2
    apt_install "postgresql-$PG_VERSION" postgresql-client-$PG_VERSION
fi
if [ ! -f "$PG_CONF_DIR/postgresql.conf" ]; then
    echo "creating the PostgreSQL cluster $PG_VERSION/main" >&2
    $SUDO pg_createcluster "$PG_VERSION" main
fi

pg_configured=0
if ! $SUDO grep -qxF "$PG_MARK" "$PG_CONF_DIR/pg_hba.conf"; then
    echo "pg_hba.conf: user postgres connects from 127.0.0.1 and ::1 without a password" >&2
    tmp=$(mktemp)
    {
        echo "$PG_MARK"
        echo "host    all    postgres    127.0.0.1/32    trust"
        echo "host    all    postgres    ::1/128         trust"
        $SUDO cat "$PG_CONF_DIR/pg_hba.conf"
    } >"$tmp"
    $SUDO install -o postgres -g postgres -m 640 "$tmp" "$PG_CONF_DIR/pg_hba.conf"
    rm -f "$tmp"
    pg_configured=1
fi
PG_EXTRA="$PG_CONF_DIR/conf.d/polaris-pipeline.conf"
PG_EXTRA_TEXT="# polaris-pipeline's tests (scripts/services.sh)
listen_addresses = 'localhost'
max_connections = 300"
if [ "$($SUDO cat "$PG_EXTRA" 2>/dev/null)" != "$PG_EXTRA_TEXT" ]; then
    echo "PostgreSQL: $PG_EXTRA (max_connections 300, loopback only)" >&2
    $SUDO mkdir -p "$PG_CONF_DIR/conf.d"
    printf '%s\n' "$PG_EXTRA_TEXT" | $SUDO tee "$PG_EXTRA" >/dev/null
    pg_configured=1
fi

pg_running() { $SUDO pg_ctlcluster "$PG_VERSION" main status >/dev/null 2>&1; }
if pg_running && [ "$pg_configured" -eq 1 ]; then
    echo "restarting PostgreSQL for its new configuration" >&2
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main restart
elif ! pg_running; then
    echo "starting PostgreSQL" >&2
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start
fi
wait_for PostgreSQL 30 pg_isready -h 127.0.0.1 -p 5432 -q
# The proof the tests rely on: a password-less connection as postgres over TCP.
if ! psql -h 127.0.0.1 -U postgres -d postgres -w -Atc 'select 1' >/dev/null; then
    echo "PostgreSQL: user postgres cannot connect to 127.0.0.1:5432 without a password" >&2
    exit 1
fi
echo "127.0.0.1:5432 - PostgreSQL $PG_VERSION accepting connections (postgres, no password)"

# --- RabbitMQ ---------------------------------------------------------------------------
if ! command -v rabbitmq-server >/dev/null 2>&1 && [ ! -x /usr/sbin/rabbitmq-server ]; then
    echo "RabbitMQ missing: installing rabbitmq-server with apt-get" >&2
    apt_install rabbitmq-server
fi
if ! tcp_open 5672; then
    echo "starting RabbitMQ" >&2
    $SUDO rabbitmq-server -detached
    # The port opens once the broker boots; the ping checks the node itself.
    wait_for "RabbitMQ (port 5672)" 120 tcp_open 5672
fi
wait_for "RabbitMQ (ping)" 60 rabbitmq-diagnostics -q ping
echo "127.0.0.1:5672 - RabbitMQ accepting connections"
