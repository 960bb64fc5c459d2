#!/usr/bin/env bash
# Start the local services the tests need when they are down, and wait until they answer:
#   PostgreSQL 127.0.0.1:5432  the metastore and Dagster's storage in the tests
#   RabbitMQ   127.0.0.1:5672  the Celery broker of the scale-out test (tests/test_celery_executor.py)
set -euo pipefail

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

if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    echo "starting PostgreSQL" >&2
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
    wait_for PostgreSQL 30 pg_isready -h 127.0.0.1 -p 5432 -q
fi
pg_isready -h 127.0.0.1 -p 5432

if ! tcp_open 5672; then
    echo "starting RabbitMQ" >&2
    rabbitmq-server -detached
    # The port opens once the broker boots; the ping checks the node itself.
    wait_for "RabbitMQ (port 5672)" 90 tcp_open 5672
fi
wait_for "RabbitMQ (ping)" 30 rabbitmq-diagnostics -q ping
echo "127.0.0.1:5672 - RabbitMQ accepting connections"
