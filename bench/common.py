"""Shared pieces of the benchmarks: databases, task rows, a Polaris catalog to seed them
with, round-trip counting, machine facts.

Nothing here is timed itself; every benchmark measures its own side and its
baseline in the same process run on the same data, so only ratios are compared
across machines.
"""

from __future__ import annotations

import json
import os
import platform
import random
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from builders.postgres import PG_ADMIN_URL, database_url, throwaway_database
from polaris_pipeline.tasks.model import TASK_TYPE_CODE, Prop

REALMS = ("POLARIS", "acme", "globex", "initech")

ENTITY_COLUMNS = (
    "realm_id",
    "catalog_id",
    "id",
    "parent_id",
    "name",
    "entity_version",
    "type_code",
    "sub_type_code",
    "create_timestamp",
    "drop_timestamp",
    "purge_timestamp",
    "to_purge_timestamp",
    "last_update_timestamp",
    "properties",
    "internal_properties",
    "grant_records_version",
    "location_without_scheme",
)


# ---------------------------------------------------------------- databases


@contextmanager
def temp_database(purpose: str) -> Iterator[str]:
    """A PostgreSQL database made for one benchmark and dropped afterwards; yields its URL.

    The tests' own throwaway databases (``builders/postgres.py``): one admin URL
    variable and one drop rule for both."""
    with throwaway_database(f"pp_bench_{purpose}") as name:
        yield database_url(name)


def libpq_dsn(url: str) -> str:
    """The plain libpq form of a SQLAlchemy URL (for psycopg.connect)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def pg_connect(url: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(libpq_dsn(url), autocommit=autocommit)


def pg_version(url: str = PG_ADMIN_URL) -> str:
    with pg_connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"


def vacuum_analyze(url: str, table: str = "polaris_schema.entities") -> None:
    with pg_connect(url) as conn:
        conn.execute(f"VACUUM (ANALYZE) {table}")


_LOST = (
    "server closed the connection",
    "terminating connection",
    "connection is lost",
    "connection lost",
    "connection refused",
    "the database system is",
    "admin shutdown",
    "connection failed",
)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is the PostgreSQL server going away."""
    seen: BaseException | None = exc
    while seen is not None:
        text = f"{type(seen).__name__} {seen}".lower()
        if any(marker in text for marker in _LOST):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def wait_for_database(timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with pg_connect(PG_ADMIN_URL) as conn:
                conn.execute("SELECT 1")
            time.sleep(5)  # a restart may come in pairs (stop, start): let it settle
            return
        except Exception:
            time.sleep(2)


# ------------------------------------------------------------------- task rows


def new_id(rng: random.Random) -> int:
    return rng.getrandbits(63) or 1


def now_ms() -> int:
    return int(time.time() * 1000)


def task_properties(task_type: int, data: str, extra: dict[str, str] | None = None) -> str:
    props = {Prop.TASK_TYPE: str(task_type), Prop.DATA: data, **(extra or {})}
    return json.dumps(props, separators=(",", ":"))


def batch_task_row(
    realm: str,
    task_id: int,
    *,
    created_ms: int,
    extra: dict[str, str] | None = None,
    n_files: int = 3,
) -> tuple[Any, ...]:
    """One BATCH_FILE_CLEANUP task as Polaris writes it, as a COPY row of ``entities``."""
    location = f"s3://warehouse-{realm.lower()}/wh/ns/t_{task_id % 997}"
    files = [
        f"{location}/metadata/{uuid.UUID(int=task_id + i)}.metadata.json" for i in range(n_files)
    ]
    data = json.dumps(
        {
            "tableId": {"namespace": ["ns"], "name": f"t_{task_id % 997}"},
            "batchFiles": files,
            "type": "TABLE_METADATA",
        },
        separators=(",", ":"),
    )
    internal = json.dumps({"storageLocation": location}, separators=(",", ":"))
    return (
        realm,
        0,
        task_id,
        0,
        f"entityCleanup_{task_id}_{files[0]}_{uuid.UUID(int=task_id)}",
        1,
        TASK_TYPE_CODE,
        0,
        created_ms,
        0,
        0,
        0,
        created_ms,
        task_properties(3, data, extra),
        internal,
        1,
        None,
    )


def copy_entities(url: str, rows: Iterable[Sequence[Any]]) -> int:
    """COPY rows (in ``ENTITY_COLUMNS`` order) into polaris_schema.entities; returns the count."""
    n = 0
    with pg_connect(url) as conn, conn.cursor() as cur:
        columns = ", ".join(ENTITY_COLUMNS)
        with cur.copy(f"COPY polaris_schema.entities ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
                n += 1
    return n


def truncate_entities(url: str) -> None:
    with pg_connect(url) as conn:
        conn.execute("TRUNCATE polaris_schema.entities")


# ------------------------------------------------------------------ the catalog


def _j(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _entity(
    realm: str,
    catalog_id: int,
    entity_id: int,
    parent_id: int,
    name: str,
    type_code: int,
    sub_type: int,
    created: int,
    props: dict[str, str],
    internal: dict[str, str],
    location: str | None = None,
) -> tuple[Any, ...]:
    return (
        realm,
        catalog_id,
        entity_id,
        parent_id,
        name,
        3,
        type_code,
        sub_type,
        created,
        0,
        0,
        0,
        created,
        _j(props),
        _j(internal),
        1,
        location,
    )


def non_task_entities(n: int, rng: random.Random) -> Iterator[tuple[Any, ...]]:
    """``n`` entities of every non-task type over the 4 realms, shaped like a Polaris catalog."""
    per_realm = n // len(REALMS)
    created = now_ms() - 30 * 86_400_000
    for realm in REALMS:
        count = 0

        def emit(row: tuple[Any, ...]) -> tuple[Any, ...]:
            nonlocal count
            count += 1
            return row

        yield emit(_entity(realm, 0, new_id(rng), 0, "root", 1, 0, created, {}, {}))
        for i in range(200):
            client = uuid.UUID(int=rng.getrandbits(128)).hex[:16]
            yield emit(
                _entity(
                    realm, 0, new_id(rng), 0, f"principal-{i}", 2, 0, created,
                    {}, {"client_id": client},
                )
            )  # fmt: skip
            yield emit(_entity(realm, 0, new_id(rng), 0, f"role-{i}", 3, 0, created, {}, {}))
        catalogs = [new_id(rng) for _ in range(10)]
        namespaces: dict[int, list[tuple[int, str]]] = {}
        for c, cat in enumerate(catalogs):
            base = f"s3://warehouse-{realm.lower()}/catalog-{c}"
            yield emit(
                _entity(
                    realm, 0, cat, 0, f"catalog-{c}", 4, 0, created,
                    {"default-base-location": base},
                    {"catalog-type": "INTERNAL", "storage_configuration_info": _j(
                        {"storageType": "S3", "allowedLocations": [base]})},
                )
            )  # fmt: skip
            for r in range(10):
                yield emit(
                    _entity(
                        realm, cat, new_id(rng), cat, f"catalog-role-{r}", 5, 0, created, {}, {}
                    )
                )
            namespaces[cat] = []
            for k in range(500):
                ns_id = new_id(rng)
                namespaces[cat].append((ns_id, f"ns_{k}"))
                yield emit(
                    _entity(
                        realm, cat, ns_id, cat, f"ns_{k}", 6, 0, created,
                        {"location": f"{base}/ns_{k}"}, {"parent-namespace": ""},
                    )
                )  # fmt: skip
        t = 0
        while count < per_realm:
            ci = t % len(catalogs)
            cat = catalogs[ci]
            ns_id, ns_name = namespaces[cat][rng.randrange(len(namespaces[cat]))]
            view = rng.random() < 0.1
            name = f"{'v' if view else 't'}_{t}"
            location = f"warehouse-{realm.lower()}/catalog-{ci}/{ns_name}/{name}"
            meta = f"s3://{location}/metadata/{t:05d}-{uuid.UUID(int=rng.getrandbits(128))}"
            yield emit(
                _entity(
                    realm, cat, new_id(rng), ns_id, name, 7, 3 if view else 2, created,
                    {"owner": "etl", "write.format.default": "parquet"},
                    {"metadata-location": meta + ".metadata.json", "parent-namespace": ns_name},
                    location=location,
                )
            )  # fmt: skip
            t += 1


def interleave(
    entities: Iterator[tuple[Any, ...]], tasks: list[tuple[Any, ...]], n_entities: int
) -> Iterator[tuple[Any, ...]]:
    """The tasks spread evenly through the entities, as they accumulate in a live heap."""
    every = max(1, n_entities // max(1, len(tasks)))
    pending = iter(tasks)
    for i, row in enumerate(entities):
        yield row
        if i % every == every - 1:
            task = next(pending, None)
            if task is not None:
                yield task
    yield from pending


@contextmanager
def catalog_database(purpose: str) -> Iterator[str]:
    """A :func:`temp_database` with Polaris's schema created and no rows; yields its URL."""
    from polaris_pipeline.metastore import Metastore

    with temp_database(purpose) as url:
        store = Metastore(url)
        store.init_schema()
        store.dispose()
        yield url


def seed_catalog(
    url: str, tasks: list[tuple[Any, ...]], n_entities: int, rng: random.Random
) -> int:
    """Copy ``n_entities`` catalog entities with ``tasks`` spread through them, then
    VACUUM (ANALYZE); returns the number of rows."""
    n = copy_entities(url, interleave(non_task_entities(n_entities, rng), tasks, n_entities))
    vacuum_analyze(url)
    return n


# ------------------------------------------------------- round trips to the server


@dataclass
class RoundTrips:
    """Client/server exchanges of this process, counted inside psycopg.

    Every query (``execute``, a prepared statement, the pool's pre-ping) and
    every internal command psycopg sends on its own (``BEGIN``, ``COMMIT``,
    ``ROLLBACK``) is one exchange with the server.
    """

    by_kind: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def reset(self) -> None:
        self.by_kind.clear()

    def snapshot(self) -> dict[str, int]:
        return dict(self.by_kind)


ROUND_TRIPS = RoundTrips()
_patched = False
_patch_lock = threading.Lock()


def _kind(query: bytes | str) -> str:
    raw = query.decode("utf-8", "replace") if isinstance(query, bytes) else query
    words = raw.lstrip(" (\n\t").split(None, 1)
    kind = words[0].upper().rstrip(";") if words else ""
    # SQLAlchemy's pool pre-ping sends an empty statement (";") or "SELECT 1".
    return kind or "PING"


def count_round_trips() -> RoundTrips:
    """Count this process's psycopg exchanges from now on (idempotent); returns the counter."""
    global _patched
    with _patch_lock:
        if _patched:
            return ROUND_TRIPS
        from psycopg import _connection_base, _cursor_base

        cursor_cls: Any = _cursor_base.BaseCursor
        conn_cls: Any = _connection_base.BaseConnection
        send = cursor_cls._execute_send
        send_prepared = cursor_cls._send_query_prepared
        prepare = cursor_cls._send_prepare
        command = conn_cls._exec_command

        def _execute_send(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            ROUND_TRIPS.by_kind[_kind(query.query)] += 1
            return send(self, query, *args, **kwargs)

        def _send_query_prepared(self: Any, name: Any, pgq: Any, *args: Any, **kw: Any) -> Any:
            ROUND_TRIPS.by_kind[_kind(pgq.query)] += 1
            return send_prepared(self, name, pgq, *args, **kw)

        def _send_prepare(self: Any, name: Any, query: Any, *args: Any, **kw: Any) -> Any:
            ROUND_TRIPS.by_kind["PREPARE"] += 1
            return prepare(self, name, query, *args, **kw)

        def _exec_command(self: Any, cmd: Any, *args: Any, **kwargs: Any) -> Any:
            ROUND_TRIPS.by_kind[_kind(cmd if isinstance(cmd, (bytes, str)) else "COMMAND")] += 1
            return command(self, cmd, *args, **kwargs)

        cursor_cls._execute_send = _execute_send
        cursor_cls._send_query_prepared = _send_query_prepared
        cursor_cls._send_prepare = _send_prepare
        conn_cls._exec_command = _exec_command
        _patched = True
        return ROUND_TRIPS


# ------------------------------------------------------------------ CPU time


def cpu_seconds_self() -> float:
    """User + system CPU seconds of this process so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first, then
    the parent's pid; CPU at 11 to 14, in clock ticks), or None when it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rsplit(")", 1)[1].split() if stat else None


def cpu_seconds_of(pid: int, *, reaped_children: bool = False) -> float | None:
    """User + system CPU seconds of a local process (a PostgreSQL backend), or None;
    with ``reaped_children``, those of the children it has waited for too."""
    fields = proc_stat(pid)
    if fields is None:
        return None
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the machine


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def memory_total_mb() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None


def _version(package: str) -> str:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return "absent"


def machine() -> dict[str, Any]:
    """Facts about where the figures were measured."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        nproc = str(usable)
    try:
        pg = pg_version()
    except Exception as exc:  # pragma: no cover - reported, not fatal
        pg = f"unreachable ({type(exc).__name__})"
    return {
        "nproc": nproc.strip(),
        "memory_mb": memory_total_mb(),
        "cpu_model": cpu_model(),
        "postgresql": pg,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "packages": {
            p: _version(p)
            for p in (
                "sqlalchemy",
                "psycopg",
                "pyiceberg",
                "fastavro",
                "s3fs",
                "boto3",
                "moto",
                "dagster",
                "dagster-postgres",
            )
        },
    }


def machine_load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def random_suffix() -> str:
    return secrets.token_hex(4)


@dataclass(frozen=True)
class DeployedSweeper:
    """The sweeper sensor as ``build_defs`` deploys it, with the resources it requires."""

    sensor: Any
    resources: dict[str, Any]


def deployed_sweeper(metastore: Any, sweeper: Any, storage: Any = None) -> DeployedSweeper:
    from polaris_pipeline.dagster import build_defs
    from polaris_pipeline.dagster.sweeper import SENSOR_NAME

    defs = build_defs(metastore=metastore, sweeper=sweeper, storage=storage)
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    resources = defs.resources or {}
    # Evaluated by hand, a sensor gets only the resources its context is given.
    return DeployedSweeper(sensor, {key: resources[key] for key in sensor.required_resource_keys})
