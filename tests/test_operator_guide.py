"""Every command of ``docs/operator-guide.md``, run as an operator would run it.

The guide's fenced blocks are read in order:

- ``sh`` blocks run as one shell session (``bash -euo pipefail``; exported
  variables and the working directory carry over from block to block) in a
  temporary directory holding copies of the project files the guide names
  (``workspace.yaml``, ``deploy/dagster.yaml``). Long-running commands
  (``dagster dev``, ``dagster-webserver``, ``dagster-daemon run``) start in the
  background, must come up (``/server_info`` answers, the daemon's heartbeat is
  live) within a bounded time, and are stopped at the end of their block.
- ``yaml`` blocks whose first line is ``# <file>.yaml`` are written to that file
  of the session's directory when the session reaches them, and each must load
  as a storage config.
- ``text`` blocks are not run.

The example names of the guide are swapped for the test's (``_substitutions``;
each must still occur in the guide). The metastore is a PostgreSQL database
created here, whose Polaris tables belong to the administrator; every
``polaris-pipeline`` command after section 2 runs as the role section 2 creates,
with exactly the grants given there, on a database whose ``CONNECT`` was
revoked from ``PUBLIC``: the sweeps, children included, prove the grants
enough. S3 is the moto server, the local warehouse a temporary directory, and
Dagster's own storage (section 4) another PostgreSQL database. The upgrade
section also runs against each Polaris schema version, 1 to 5. Everything a
block printed is in the test's captured output, shown when it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.catalogs import catalog_entity
from builders.ports import free_port
from builders.postgres import database_url, throwaway_database
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.tasks.model import NewTask, Prop
from tests.support.iceberg import table_files
from tests.support.metastore import PG_ADMIN_URL
from tests.support.s3 import MotoS3

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "operator-guide.md"
BIN = Path(sys.executable).parent
REALM = "POLARIS"
DEAD_TASK_ID = 4711
OLD_MS = 10 * 60_000
START_TIMEOUT_S = 120
COMMAND_TIMEOUT_S = 300
LONG_RUNNING = ("dagster dev", "dagster-webserver", "dagster-daemon run")
UPGRADE_SECTION = "8. Upgrading Polaris"

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


# -- the guide -------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    section: str
    line: int

    @property
    def first(self) -> str:
        return self.code.strip().splitlines()[0]


def guide_blocks(markdown: str) -> list[Block]:
    """Fenced blocks in document order, with the ``## `` section each is in."""
    blocks: list[Block] = []
    section = ""
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            start = i
            body: list[str] = []
            i += 1
            while i < len(lines) and lines[i].rstrip() != "```":
                body.append(lines[i])
                i += 1
            assert i < len(lines), f"unclosed block at line {start + 1}"
            blocks.append(Block(fence.group(1), "\n".join(body) + "\n", section, start + 1))
        i += 1
    return blocks


def test_every_block_of_the_guide_is_run_or_marked_text() -> None:
    blocks = guide_blocks(GUIDE.read_text())
    # json: documents the guide shows (the S3 lifecycle rule), checked on their own.
    assert {b.lang for b in blocks} <= {"sh", "yaml", "text", "json"}, {b.lang for b in blocks}
    for block in blocks:
        if block.lang == "yaml":
            assert re.match(r"^# [\w.-]+\.yaml$", block.first), block
    # The grants are exactly these, and the table of section 2 says the same.
    [grants] = [b for b in blocks if b.lang == "sh" and b.first.startswith("psql ")]
    statements = [s.strip() for s in grants.code.split(";") if "GRANT" in s]
    assert [s[s.index("GRANT") :] for s in statements] == [
        "GRANT CONNECT ON DATABASE polaris TO polaris_cleanup",
    ]
    # The rest is grant-role's script (tests/test_metastore_role.py holds its text).
    assert "polaris-pipeline grant-role polaris_cleanup \\\n  | psql " in grants.code
    # Every project file the guide tells the operator to use exists.
    for name in re.findall(r"`((?:docs|deploy)/[\w./-]+|workspace\.yaml)`", GUIDE.read_text()):
        assert (ROOT / name).is_file(), name


# -- a shell session -------------------------------------------------------------------


@dataclass
class Session:
    """One operator's shell: exports and the working directory persist across blocks."""

    cwd: Path
    env: dict[str, str]
    substitutions: list[tuple[str, str]]
    state: Path = field(init=False)
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = self.cwd.parent / f"{self.cwd.name}.session"
        self.state.mkdir()
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items())
        (self.state / "env").write_text(exports)
        (self.state / "cwd").write_text(str(self.cwd))

    def substitute(self, code: str) -> str:
        for example, real in self.substitutions:
            code = code.replace(example, real)
        return code

    def _prologue(self) -> str:
        return f'source {self.state / "env"}\ncd "$(cat {self.state / "cwd"})"\n'

    def run(self, script: str) -> str:
        """Run ``script`` in the session; its output (stdout and stderr, interleaved)."""
        wrapped = (
            "set -euo pipefail\n"
            + self._prologue()
            + script
            + f"\nexport -p > {self.state / 'env.new'}\n"
            + f"mv {self.state / 'env.new'} {self.state / 'env'}\n"
            + f"pwd > {self.state / 'cwd'}\n"
        )
        proc = subprocess.run(
            ["bash", "-c", wrapped],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        self.log.append(f"$ {script}\n{proc.stdout}")
        print(self.log[-1])
        assert proc.returncode == 0, f"exit {proc.returncode}:\n$ {script}\n{proc.stdout[-4000:]}"
        return proc.stdout

    def start(self, command: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                ["bash", "-c", self._prologue() + "exec " + command],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
            )

    def run_block(self, block: Block) -> str:
        """Run an ``sh`` block: plain lines in order, long-running ones in the background."""
        code = self.substitute(block.code)
        output: list[str] = []
        background: list[subprocess.Popen[bytes]] = []
        pending: list[str] = []
        try:
            for line in code.splitlines(keepends=True):
                if line.strip().startswith(LONG_RUNNING):
                    if "".join(pending).strip():
                        output.append(self.run("".join(pending)))
                    pending = []
                    background.append(self._start_long_running(line.strip(), len(background)))
                else:
                    pending.append(line)
            if "".join(pending).strip():
                output.append(self.run("".join(pending)))
        finally:
            for proc in reversed(background):
                stop(proc)
        return "".join(output)

    def _start_long_running(self, command: str, n: int) -> subprocess.Popen[bytes]:
        log = self.state / f"background-{len(self.log)}-{n}.log"
        proc = self.start(command, log)
        self.log.append(f"$ {command} &  (log: {log})")
        started = time.monotonic()
        port = re.search(r"-p (\d+)", command)
        while time.monotonic() < started + START_TIMEOUT_S:
            if proc.poll() is not None:
                pytest.fail(f"{command!r} exited with {proc.returncode}:\n{log.read_text()}")
            daemon_up = command.startswith("dagster-daemon") and self._daemon_live()
            if daemon_up or (port and _serves_dagster(int(port.group(1)))):
                print(f"$ {command} &  (up in {time.monotonic() - started:.0f} s)")
                return proc
            time.sleep(1)
        stop(proc)
        pytest.fail(f"{command!r} did not come up in {START_TIMEOUT_S} s:\n{log.read_text()}")

    def _daemon_live(self) -> bool:
        proc = subprocess.run(
            ["bash", "-c", self._prologue() + "dagster-daemon liveness-check"],
            env=self.env,
            capture_output=True,
            timeout=60,
        )
        return proc.returncode == 0

    def write_file(self, block: Block) -> Path:
        name = block.first.removeprefix("# ").strip()
        cwd = Path((self.state / "cwd").read_text().strip())
        path = cwd / name
        path.write_text(self.substitute(block.code))
        return path


def _serves_dagster(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as r:
            return r.status == 200 and "dagster_webserver_version" in json.load(r)
    except (OSError, ValueError):
        return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a background command and everything it started (its process group)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=15)


def _base_env(home: Path) -> dict[str, str]:
    return {
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TMPDIR": str(home),
    }


def _copy_project_files(cwd: Path) -> None:
    for name in ("workspace.yaml", "deploy/dagster.yaml"):
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, cwd / name)


# -- the world the guide's commands act on ------------------------------------------------


@dataclass
class World:
    """What a Polaris left in the metastore and in storage, for the guide to clean up."""

    store: Metastore  # the administrator's view (Polaris's own role)
    moto: MotoS3
    bucket: str
    table_files: set[str]
    events_keys: list[str]
    dead_keys: list[str]
    kept_keys: list[str]
    table_task: int = 0
    events_task: int = 0
    # A dropped table whose task row is gone and whose files stayed (section 11).
    leaked_root: str = ""
    leaked_uuid: str = ""

    def s3_keys(self) -> set[str]:
        listing = self.moto.client().list_objects_v2(Bucket=self.bucket)
        return {o["Key"] for o in listing.get("Contents", [])}


def _put(moto: MotoS3, bucket: str, prefix: str, n: int) -> list[str]:
    keys = [f"{prefix}/metadata/snap-{i}-{uuid.uuid4().hex[:8]}.avro" for i in range(n)]
    client = moto.client()
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"m" * 512)
    return keys


def _seed(store: Metastore, moto: MotoS3, bucket: str, warehouse_dir: Path) -> World:
    """Polaris's leftovers: two orphans, a dead task, a live lease, a task within grace."""
    now = store.now_ms()
    catalog = built_tables.open_catalog(
        built_tables.local_warehouse_uri(warehouse_dir), warehouse_dir.parent / "catalog.db"
    )
    table = built_tables.build_table(catalog, ("sales", "orders"), partitioned=True, appends=2)
    files = {f for f in table_files(table) if Path(f.removeprefix("file://")).exists()}
    dropped = built_tasks.drop_table_task(table, realm_id=REALM, create_timestamp=now - OLD_MS)

    warehouse = f"s3://{bucket}/warehouse/sales"
    events = _put(moto, bucket, "warehouse/sales/events", 3)
    dead = _put(moto, bucket, "warehouse/sales/clicks", 2)
    kept = _put(moto, bucket, "warehouse/sales/payments", 2) + _put(
        moto, bucket, "warehouse/sales/visits", 2
    )

    def batch(location: str, keys: list[str], **kwargs: Any) -> NewTask:
        return batch_task(
            REALM,
            [f"s3://{bucket}/{k}" for k in keys],
            internal={"storageLocation": f"{warehouse}/{location}"},
            **kwargs,
        )

    events_task = batch("events", events, create_timestamp=now - OLD_MS)
    dead_task = batch(
        "clicks",
        dead,
        create_timestamp=now - 7 * 24 * 3600_000,
        extra={
            Prop.EXECUTOR: f"polaris-pipeline:run:{uuid.uuid4()}",
            Prop.START_TIME: str(now - 3600_000),
            Prop.END_TIME: str(now - 3599_000),
            Prop.ATTEMPT_COUNT: "8",
            Prop.STATUS: "dead",
            Prop.ERROR: f"2 delete(s) failed, first 's3://{bucket}/{dead[0]}': "
            "PermissionError: The provided token has expired.",
            Prop.RUN_ID: str(uuid.uuid4()),
        },
    )
    dead_task = NewTask(
        realm_id=dead_task.realm_id,
        id=DEAD_TASK_ID,
        name="entityCleanup_clicks_batch",
        properties=dead_task.properties,
        internal_properties=dead_task.internal_properties,
        create_timestamp=dead_task.create_timestamp,
    )
    live_task = batch(
        "payments",
        kept[:2],
        create_timestamp=now - OLD_MS,
        extra={
            Prop.EXECUTOR: "polaris-server-1",
            Prop.START_TIME: str(now),
            Prop.ATTEMPT_COUNT: "1",
        },
    )
    fresh_task = batch("visits", kept[2:], create_timestamp=now)
    store.insert_tasks([dropped, events_task, dead_task, live_task, fresh_task])
    # The catalog these tables live in, and a table Polaris dropped whose task is gone.
    catalog_entity(store, "lake", built_tables.local_warehouse_uri(warehouse_dir))
    leaked = built_tables.build_table(catalog, ("sales", "returns"), appends=1)
    return World(
        store=store,
        moto=moto,
        bucket=bucket,
        table_files=files,
        events_keys=events,
        dead_keys=dead,
        kept_keys=kept,
        table_task=dropped.id,
        events_task=events_task.id,
        leaked_root=leaked.location(),
        leaked_uuid=str(leaked.metadata.table_uuid),
    )


def _local_exists(uri: str) -> bool:
    return Path(uri.removeprefix("file://")).exists()


# -- what each sh block must do ------------------------------------------------------------

Check = Callable[[str, "Context"], None]


@dataclass
class Context:
    world: World
    session: Session
    role: str
    database: str
    dagster_db: str


def _help(out: str, ctx: Context) -> None:
    assert "Find and finish Apache Polaris cleanup tasks" in out
    assert re.search(r"^dagster, version \d+\.\d+\.\d+$", out, re.M), out


def _scratch(out: str, ctx: Context) -> None:
    assert "created Polaris entities table in sqlite:///" in out
    assert "0 task(s)" in out
    assert (ctx.session.cwd / "scratch.db").is_file()


def _grants(out: str, ctx: Context) -> None:
    # psql's command tags: the role, CONNECT, then grant-role's script.
    assert out.count("GRANT") == 4 and "CREATE ROLE" in out, out
    assert out.count("CREATE POLICY") == 4 and "ALTER TABLE" in out and "COMMIT" in out, out
    engine = create_engine(database_url(ctx.database), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            grants = conn.execute(
                text(
                    "SELECT table_name, privilege_type FROM information_schema.role_table_grants "
                    "WHERE grantee = :role ORDER BY 1, 2"
                ),
                {"role": ctx.role},
            ).all()
            usage = conn.execute(
                text("SELECT has_schema_privilege(:role, 'polaris_schema', 'USAGE')"),
                {"role": ctx.role},
            ).scalar_one()
            attrs = conn.execute(
                text("SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname=:r"),
                {"r": ctx.role},
            ).one()
            has_events = conn.execute(
                text("SELECT to_regclass('polaris_schema.events') IS NOT NULL")
            ).scalar_one()
            secured = conn.execute(
                text(
                    "SELECT relrowsecurity FROM pg_class "
                    "WHERE oid = 'polaris_schema.entities'::regclass"
                )
            ).scalar_one()
            policies = (
                conn.execute(
                    text(
                        "SELECT cmd FROM pg_policies WHERE tablename = 'entities' "
                        "AND :role = ANY (roles) ORDER BY 1"
                    ),
                    {"role": ctx.role},
                )
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    assert [tuple(g) for g in grants] == [
        ("entities", "DELETE"),
        ("entities", "INSERT"),
        ("entities", "SELECT"),
        ("entities", "UPDATE"),
        *([("events", "INSERT"), ("events", "SELECT")] if has_events else []),
        ("version", "SELECT"),
    ]
    assert secured is True
    assert policies == ["DELETE", "INSERT", "SELECT", "UPDATE"]
    assert usage is True
    assert tuple(attrs) == (False, False, False)


def _connected(out: str, ctx: Context) -> None:
    # As the new role, with nothing but its grants.
    url = _session_env(ctx.session)["POLARIS_METASTORE_URL"]
    assert make_url(url).username == ctx.role
    assert "5 task(s), 1 dead, 1 leased, 2 orphaned, 1 pending" in out, out
    assert str(DEAD_TASK_ID) in out and "polaris-server-1" in out


def _swept(out: str, ctx: Context) -> None:
    world = ctx.world
    assert re.search(r"dry run: 2 task\(s\), \d+ file\(s\) would be deleted; nothing was", out)
    # The sweep: the table cleanup (and the children it inserted) and the S3 batch.
    summary = re.search(
        r"swept (\d+) task\(s\): (\d+) done\n"
        r"  (\d+) file\(s\) deleted, \d+ already gone, 0 refused, .* freed; children: (\d+) done\n",
        out,
    )
    assert summary, out
    assert int(summary.group(1)) == int(summary.group(2)) > 2  # children ran too
    assert int(summary.group(4)) == int(summary.group(1)) - 2  # all but the two roots
    assert int(summary.group(3)) == len(world.table_files) + len(world.events_keys)
    assert not any(_local_exists(f) for f in world.table_files)
    keys = world.s3_keys()
    assert not keys & set(world.events_keys)
    assert set(world.dead_keys + world.kept_keys) <= keys
    assert world.store.get_task(REALM, world.table_task) is None
    assert world.store.get_task(REALM, world.events_task) is None


def _dev(out: str, ctx: Context) -> None:
    # `dagster dev` served /server_info (checked when it started) on this DAGSTER_HOME.
    home = Path(_session_env(ctx.session)["DAGSTER_HOME"])
    assert home == ctx.session.cwd / "dagster_home"
    assert (home / "history").is_dir() or (home / "storage").is_dir(), list(home.iterdir())


def _deploy_env(out: str, ctx: Context) -> None:
    env = _session_env(ctx.session)
    home = Path(env["DAGSTER_HOME"])
    assert (home / "dagster.yaml").read_text() == (ROOT / "deploy/dagster.yaml").read_text()
    assert env["DAGSTER_PG_DB"] == ctx.dagster_db and env["DAGSTER_PG_PASSWORD"]
    assert env["DAGSTER_PG_PORT"] == str(make_url(PG_ADMIN_URL).port or 5432)


def _deployed(out: str, ctx: Context) -> None:
    # The daemon and the web server came up (checked as they started); the daemon's
    # heartbeats are in Dagster's PostgreSQL database, not in files.
    assert not (Path(_session_env(ctx.session)["DAGSTER_HOME"]) / "history").exists()
    engine = create_engine(database_url(ctx.dagster_db), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            beats = conn.execute(text("SELECT count(*) FROM daemon_heartbeats")).scalar_one()
    finally:
        engine.dispose()
    assert beats >= 1


def _migrated(out: str, ctx: Context) -> None:
    assert "run_storage: PostgresRunStorage" in out, out
    assert "Storage schema state after migration" in out


def _backlog(out: str, ctx: Context) -> None:
    assert "3 task(s), 1 dead, 1 leased, 1 pending" in out, out
    docs = json.loads(out[out.index("\n[") + 1 :])
    # Ids are strings in JSON: 63-bit numbers do not survive a parser using doubles.
    assert [(d["id"], d["state"]) for d in docs] == [(str(DEAD_TASK_ID), "dead")]
    assert "token has expired" in docs[0]["last_error"]


def _requeued(out: str, ctx: Context) -> None:
    world = ctx.world
    assert re.search(rf"^{DEAD_TASK_ID}\s+{REALM}\s+batch_file_cleanup\s.*\bdead\b", out, re.M)
    assert f"requeued task {DEAD_TASK_ID} in realm '{REALM}': now orphaned" in out
    swept = r"swept 1 task\(s\): 1 done\n  2 file"
    assert re.search(swept, out)
    assert not world.s3_keys() & set(world.dead_keys)
    assert world.store.get_task(REALM, DEAD_TASK_ID) is None


def _holders(out: str, ctx: Context) -> None:
    assert "2 task(s), 1 leased, 1 pending" in out, out
    assert "polaris-server-1" in out
    assert set(ctx.world.kept_keys) <= ctx.world.s3_keys()  # a live lease is left alone


def _upgrade(out: str, ctx: Context) -> None:
    assert "2 task(s), 1 leased, 1 pending" in out
    assert "dry run: 0 task(s), 0 file(s) would be deleted; nothing was changed" in out


def _leaks(out: str, ctx: Context) -> None:
    # The swept table's directory is gone or empty; the dropped one left whole is the leak.
    assert "catalog 'lake' (realm POLARIS): 1 leaked root(s)" in out, out
    assert "\n1 leaked root(s)" in out
    doc = json.loads((ctx.session.cwd / "leaks.json").read_text())
    [catalog] = doc["catalogs"]
    [root] = catalog["roots"]
    assert (root["root"], root["uuid"]) == (ctx.world.leaked_root, ctx.world.leaked_uuid)
    # The world records no drop event (Polaris 1.6+'s listener is off): nobody is named.
    assert root["objects"] > 0 and root["dropped_by"] is None


# The sh blocks of the guide, in order: the first line each starts with, and its check.
SH_CHECKS: list[tuple[str, Check]] = [
    ("polaris-pipeline --help", _help),
    ("export POLARIS_METASTORE_URL=sqlite:///", _scratch),
    ("psql ", _grants),
    ("export PGPASSWORD=", _connected),
    ("export POLARIS_PIPELINE_STORAGE_CONFIG=", _swept),
    ("export DAGSTER_HOME=$PWD/dagster_home", _dev),
    ("export DAGSTER_HOME=/srv/dagster", _deploy_env),
    ("dagster-daemon run", _deployed),
    ("dagster instance migrate", _migrated),
    ("polaris-pipeline tasks list", _backlog),
    ("polaris-pipeline tasks list --state dead", _requeued),
    ("polaris-pipeline tasks list --state pending --state leased", _holders),
    ("polaris-pipeline tasks list", _upgrade),
    ("polaris-pipeline leaks", _leaks),
]


def _session_env(session: Session) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f"source {session.state / 'env'}; env -0"],
        env=session.env,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def _substitutions(
    *, database: str, role: str, dagster_db: str, bucket: str, moto: MotoS3, tmp: Path, port: int
) -> list[tuple[str, str]]:
    admin = make_url(PG_ADMIN_URL)
    server = f"{admin.host or '127.0.0.1'}:{admin.port or 5432}"
    secret = tmp / "dagster-pg-password"
    secret.write_text((admin.password or "unused") + "\n")
    psql_url = admin.set(drivername="postgresql", database=database)
    return [
        # The administrator's psql, then the new role's URL, then the database's name.
        (
            "postgresql://polaris@db.example.com:5432/polaris",
            psql_url.render_as_string(hide_password=False),
        ),
        ("db.example.com:5432/polaris", f"{server}/{database}"),
        ("ON DATABASE polaris TO", f'ON DATABASE "{database}" TO'),
        ("polaris_cleanup", role),
        # Dagster's own database.
        ("DAGSTER_PG_HOST=db.example.com", f"DAGSTER_PG_HOST={admin.host or '127.0.0.1'}"),
        ("DAGSTER_PG_PORT=5432", f"DAGSTER_PG_PORT={admin.port or 5432}"),
        ("DAGSTER_PG_USERNAME=dagster", f"DAGSTER_PG_USERNAME={admin.username or 'postgres'}"),
        ("DAGSTER_PG_DB=dagster", f"DAGSTER_PG_DB={dagster_db}"),
        ("/run/secrets/dagster-pg-password", str(secret)),
        ("/srv/dagster", str(tmp / "srv-dagster")),
        ("-h 0.0.0.0 -p 3000", f"-h 127.0.0.1 -p {port}"),
        ("-p 3000", f"-p {port}"),
        # Storage: the moto server and a local directory.
        ("s3://lakehouse", f"s3://{bucket}"),
        ("https://s3.eu-central-1.amazonaws.com", moto.endpoint_url),
        ("region_name: eu-central-1", f"region_name: {moto.region}"),
        ("/mnt/warehouse", str(tmp / "mnt-warehouse")),
    ]


def _storage_env(moto: MotoS3) -> dict[str, str]:
    return {
        "LAKEHOUSE_S3_KEY": moto.key,
        "LAKEHOUSE_S3_SECRET": moto.secret,
        # Only loaded, never used: the guide's GCS and Azure examples.
        "GCS_SERVICE_ACCOUNT_JSON_PATH": "/nonexistent/service-account.json",
        "AZURE_STORAGE_KEY": "not-a-real-key",
    }


def test_the_lifecycle_rule_of_the_guide_is_one_s3_accepts(
    moto_server: MotoS3, s3_bucket: str
) -> None:
    """The guide's ``json`` block is the rule that reclaims what versioning keeps: S3
    (moto) takes it as the bucket's lifecycle, and it expires noncurrent versions."""
    [block] = [b for b in guide_blocks(GUIDE.read_text()) if b.lang == "json"]
    rule = json.loads(block.code)
    client = moto_server.client()
    client.put_bucket_versioning(Bucket=s3_bucket, VersioningConfiguration={"Status": "Enabled"})
    client.put_bucket_lifecycle_configuration(Bucket=s3_bucket, LifecycleConfiguration=rule)
    [stored] = client.get_bucket_lifecycle_configuration(Bucket=s3_bucket)["Rules"]
    assert stored["NoncurrentVersionExpiration"]["NoncurrentDays"] > 0


# -- the guide, run ------------------------------------------------------------------------


def test_the_guide_runs_end_to_end_with_exactly_the_documented_grants(
    tmp_path: Path, moto_server: MotoS3, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    guide = GUIDE.read_text()
    blocks = guide_blocks(guide)
    sh_blocks = [b for b in blocks if b.lang == "sh"]
    assert len(sh_blocks) == len(SH_CHECKS), "the guide's sh blocks and SH_CHECKS differ"
    for name, value in _storage_env(moto_server).items():
        monkeypatch.setenv(name, value)  # for loading the yaml examples here

    role = f"pp_guide_{uuid.uuid4().hex[:10]}"
    try:
        with (
            throwaway_database("pp_guide_polaris") as database,
            throwaway_database("pp_guide_dagster") as dagster_db,
        ):
            _run_guide(blocks, tmp_path, moto_server, s3_bucket, role, database, dagster_db)
    finally:
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        with admin.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def _run_guide(
    blocks: list[Block],
    tmp_path: Path,
    moto_server: MotoS3,
    s3_bucket: str,
    role: str,
    database: str,
    dagster_db: str,
) -> None:
    admin = create_engine(database_url(database), isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        # A hardened database: nobody connects or creates temp tables unless granted.
        conn.execute(text(f'REVOKE CONNECT, TEMPORARY ON DATABASE "{database}" FROM PUBLIC'))
    admin.dispose()
    # Polaris's tables, owned by the administrator (Polaris's own role here).
    store = Metastore(database_url(database))
    store.init_schema()
    with store.engine.begin() as conn:
        # init-metastore writes the version row itself now; keep it at 5 either way.
        conn.execute(
            text(
                "INSERT INTO polaris_schema.version VALUES ('version', 5) "
                "ON CONFLICT (version_key) DO UPDATE SET version_value = 5"
            )
        )
    try:
        world = _seed(store, moto_server, s3_bucket, tmp_path / "mnt-warehouse")
        cwd = tmp_path / "work"
        cwd.mkdir()
        _copy_project_files(cwd)
        session = Session(
            cwd=cwd,
            env={**_base_env(tmp_path), **_storage_env(moto_server)},
            substitutions=_substitutions(
                database=database,
                role=role,
                dagster_db=dagster_db,
                bucket=s3_bucket,
                moto=moto_server,
                tmp=tmp_path,
                port=free_port(),
            ),
        )
        guide = GUIDE.read_text()
        for example, _ in session.substitutions:
            assert example in guide, f"{example!r} no longer occurs in the guide"
        ctx = Context(world, session, role, database, dagster_db)
        checks = iter(SH_CHECKS)
        for block in blocks:
            if block.lang == "yaml":
                path = session.write_file(block)
                StorageConfig.load(path)  # every example loads (secrets from the environment)
            elif block.lang == "sh":
                prefix, check = next(checks)
                assert block.first.startswith(prefix), (block.line, block.first)
                started = time.monotonic()
                out = session.run_block(block)
                print(f"guide line {block.line}: {time.monotonic() - started:.1f} s")
                check(out, ctx)
    finally:
        store.dispose()


# -- section 8: every Polaris schema version ---------------------------------------------

_ENTITIES_DDL = """
CREATE TABLE {schema}entities (
    realm_id TEXT NOT NULL,
    catalog_id BIGINT NOT NULL,
    id BIGINT NOT NULL,
    parent_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    entity_version INT NOT NULL,
    type_code INT NOT NULL,
    sub_type_code INT NOT NULL,
    create_timestamp BIGINT NOT NULL,
    drop_timestamp BIGINT NOT NULL,
    purge_timestamp BIGINT NOT NULL,
    to_purge_timestamp BIGINT NOT NULL,
    last_update_timestamp BIGINT NOT NULL,
    properties {json} NOT NULL,
    internal_properties {json} NOT NULL,
    grant_records_version INT NOT NULL,{location}
    PRIMARY KEY (realm_id, id),
    CONSTRAINT constraint_name UNIQUE (realm_id, catalog_id, parent_id, type_code, name)
)
"""


def _polaris_layout(url: str, version: int) -> None:
    """Polaris's ``entities`` and ``version`` tables as schema ``version`` has them."""
    engine = create_engine(url, poolclass=NullPool)
    pg = engine.dialect.name == "postgresql"
    schema = "polaris_schema." if pg else ""
    location = "\n    location_without_scheme TEXT," if version >= 2 else ""
    try:
        with engine.begin() as conn:
            if pg:
                conn.execute(text("CREATE SCHEMA polaris_schema"))
            ddl = _ENTITIES_DDL.format(
                schema=schema, json="JSONB" if pg else "TEXT", location=location
            )
            conn.execute(text(ddl))
            conn.execute(
                text(
                    f"CREATE TABLE {schema}version "
                    "(version_key TEXT PRIMARY KEY, version_value INTEGER NOT NULL)"
                )
            )
            conn.execute(
                text(f"INSERT INTO {schema}version VALUES ('version', :v)"), {"v": version}
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_upgrade_section_reads_every_polaris_schema_version(
    version: int, metastore_url: str, tmp_path: Path
) -> None:
    _polaris_layout(metastore_url, version)
    store = Metastore(metastore_url)
    assert store.check_schema() == version
    table = tmp_path / "wh" / "sales" / "t"
    (table / "metadata").mkdir(parents=True)
    files = [table / "metadata" / f"snap-{i}.avro" for i in range(3)]
    for f in files:
        f.write_bytes(b"x" * 10)
    now = store.now_ms()
    orphan = batch_task(
        REALM,
        [f"file://{f}" for f in files],
        internal={"storageLocation": f"file://{table}"},
        create_timestamp=now - OLD_MS,
    )
    store.insert_tasks([orphan])
    store.dispose()
    (tmp_path / "storage.yaml").write_text(f"allowed_prefixes:\n  - file://{tmp_path / 'wh'}\n")

    cwd = tmp_path / "work"
    cwd.mkdir()
    session = Session(
        cwd=cwd,
        env={
            **_base_env(tmp_path),
            "POLARIS_METASTORE_URL": metastore_url,
            "POLARIS_PIPELINE_STORAGE_CONFIG": str(tmp_path / "storage.yaml"),
        },
        substitutions=[],
    )
    blocks = [
        b
        for b in guide_blocks(GUIDE.read_text())
        if b.section == UPGRADE_SECTION and b.lang == "sh"
    ]
    assert blocks, f"no sh block in section {UPGRADE_SECTION!r}"
    out = "".join(session.run_block(b) for b in blocks)
    assert re.search(rf"^{orphan.id}\s+{REALM}\s+batch_file_cleanup\s.*\borphaned\b", out, re.M)
    assert "1 task(s), 1 orphaned" in out
    assert out.count("  delete  file://") == len(files)
    assert "dry run: 1 task(s), 3 file(s) would be deleted; nothing was changed" in out
    assert all(f.exists() for f in files)
