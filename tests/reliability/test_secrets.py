"""Scenario 8: database passwords and storage keys never appear in anything a run produces."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from sqlalchemy.engine import make_url

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from tests.reliability.harness import PgRole, RelDb, Scenario, Worker, Workers, rel_policy
from tests.support.dagster import temp_instance
from tests.support.iceberg import Warehouse, table_files
from tests.support.s3 import MotoS3

KEY_ENV, SECRET_ENV = "PP_REL_S3_KEY", "PP_REL_S3_SECRET"
AZURE_ENV = "PP_REL_AZURE_CONNECTION"
UNSET_ENV = "PP_REL_NEVER_SET_TOKEN"


def query_url(role: PgRole, url: str | None = None) -> str:
    """``url`` (the role's) with its password moved into the query, as libpq also takes
    it, beside an ``sslpassword``: the spelling a userinfo mask does not cover."""
    base = make_url(url or role.url)
    return base.set(
        password=None, query={"password": role.password, "sslpassword": role.password}
    ).render_as_string(hide_password=False)


@dataclass
class Setup:
    store: Metastore
    secrets: list[str]
    env: dict[str, str]
    config_path: Path
    oracle: set[str]
    tmp: Path
    failing: dict[str, str] = field(default_factory=dict)

    def leaks_in(self, label: str, text: str) -> list[str]:
        return [f"{label}: {s[:6]}..." for s in self.secrets if s in text]

    def leaks_in_rows(self) -> list[str]:
        leaks: list[str] = []
        for row in self.store.list_tasks():
            blob = json.dumps([row.name, row.properties, row.internal_properties])
            leaks += self.leaks_in(f"task {row.id} row", blob)
        return leaks


@pytest.fixture
def secret_setup(
    rel_db: RelDb,
    pg_role: PgRole,
    s3_warehouse: Warehouse,
    moto_server: MotoS3,
    s3_bucket: str,
    tmp_path: Path,
) -> Setup:
    access_key = f"AKIAPPSECRET{uuid.uuid4().hex[:12].upper()}"
    secret_key = f"pp-s3-SECRET-{uuid.uuid4().hex}"
    account_key = base64.b64encode(b"\xfb\xff" + uuid.uuid4().bytes * 3).decode()
    # adlfs's connection string: the account key inside (no Azure table here: what is
    # searched is that the configured string never shows, loaded on every run).
    connection = (
        f"DefaultEndpointsProtocol=https;AccountName=ppsecret;AccountKey={account_key};"
        "BlobEndpoint=http://127.0.0.1:9/ppsecret;"
    )
    creds = {"key": {"env": KEY_ENV}, "secret": {"env": SECRET_ENV}}
    config = {
        "locations": [
            {
                "prefix": "s3://",
                "options": {
                    **creds,
                    "endpoint_url": moto_server.endpoint_url,
                    "client_kwargs": {"region_name": moto_server.region},
                },
            },
            {"prefix": "abfs://", "options": {"connection_string": {"env": AZURE_ENV}}},
            {
                "prefix": "s3://unreachable-bucket",
                "options": {
                    **creds,
                    "endpoint_url": "http://127.0.0.1:9",
                    "config_kwargs": {
                        "connect_timeout": 1,
                        "read_timeout": 1,
                        "retries": {"max_attempts": 1},
                    },
                },
            },
        ]
    }
    config_path = tmp_path / "storage.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    store = Metastore(rel_db.url, policy=rel_policy(max_attempts=2))
    table = s3_warehouse.build("t", with_deletes=True)
    setup = Setup(
        store=store,
        secrets=[
            access_key,
            secret_key,
            quote(secret_key, safe=""),
            account_key,
            quote(account_key, safe=""),
            *pg_role.spellings(),
        ],
        env={KEY_ENV: access_key, SECRET_ENV: secret_key, AZURE_ENV: connection},
        config_path=config_path,
        oracle=table_files(table),
        tmp=tmp_path,
        failing={
            "unreachable endpoint": "s3://unreachable-bucket/wh/ns/t",
            "wrong bucket": f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/wh/ns/t",
            "outside the location": f"s3://{s3_bucket}/wh/ns/t",
        },
    )
    store.insert_tasks([built_tasks.drop_table_task(table, realm_id="r", create_timestamp=0)])
    for name, loc in setup.failing.items():
        path = f"{loc}/metadata/x.avro" if name != "outside the location" else f"s3://{s3_bucket}/x"
        store.insert_tasks(
            [
                batch_task(
                    "r", [path], name=name, internal={"storageLocation": loc}, create_timestamp=0
                )
            ]
        )
    return setup


LOAD = (
    "a role with a password in the metastore URL (in its userinfo, and in its query as "
    "password= and sslpassword=); a storage config whose S3 key and secret, and an Azure "
    "connection string with its account key, come from environment variables; one S3 "
    "table (moto) to drop and three failing tasks (unreachable endpoint, wrong bucket, "
    "path outside the location)"
)


@pytest.mark.scenario(8, "Secrets: the CLI's output, errors and task rows")
def test_no_secret_in_cli_output_or_task_rows(
    secret_setup: Setup,
    pg_role: PgRole,
    workers: Workers,
    scenario: Scenario,
    s3_warehouse: Warehouse,
) -> None:
    s = secret_setup
    unset = s.tmp / "unset.yaml"
    unset.write_text(
        yaml.safe_dump(
            {"locations": [{"prefix": "s3://", "options": {"token": {"env": UNSET_ENV}}}]}
        ),
        encoding="utf-8",
    )
    broken = s.tmp / "broken.yaml"
    # A YAML error on the line that holds a secret: the message must not quote the line.
    broken.write_text(
        f"locations:\n  - prefix: s3://x\n    options: {{secret: {s.secrets[1]}: [\n",
        encoding="utf-8",
    )
    scenario.load = LOAD
    url = pg_role.url
    common = ["--metastore", url, "--grace-ms", "0"]
    runs: dict[str, Worker] = {}

    def cli(name: str, *argv: str) -> Worker:
        w = workers.start(name, "cli", argv=list(argv), env=s.env)
        w.wait(180)
        runs[name] = w
        return w

    config = ["--storage-config", str(s.config_path)]
    cli("dry run", "sweep", "--dry-run", *config, *common)
    cli("sweep", "sweep", *config, *common)
    cli("verbose sweep", "-v", "sweep", *config, *common)
    cli("tasks list", "tasks", "list", "--json", *common)
    left = [t.id for t in s.store.list_tasks()]
    failed = next(t for t in s.store.list_tasks() if t.name == "unreachable endpoint")
    cli("tasks show", "tasks", "show", str(failed.id), "--realm", "r", *common)
    cli("config with a YAML error", "sweep", "--storage-config", str(broken), *common)
    cli(
        "config naming an unset variable",
        "sweep",
        "--storage-config",
        str(unset),
        *common,
    )
    cli("unreachable database", "tasks", "list", "--metastore", url.replace(":5432/", ":9/"))
    cli("unknown database", "tasks", "list", "--metastore", url.rsplit("/", 1)[0] + "/nope")
    in_query = query_url(pg_role)
    cli("tasks list, password in the query", "tasks", "list", "--json", "--metastore", in_query)
    cli("init-metastore, password in the query", "init-metastore", "--metastore", in_query)
    cli(
        "unreachable database, password in the query",
        "tasks",
        "list",
        "--metastore",
        query_url(pg_role, url.replace(":5432/", ":9/")),
    )
    scenario.fault = "CLI runs: " + "; ".join(runs)

    leaks: list[str] = []
    for name, w in runs.items():
        leaks += s.leaks_in(f"{name} stdout", w.stdout())
        leaks += s.leaks_in(f"{name} stderr", w.stderr())
    leaks += s.leaks_in_rows()
    scenario.losses(secrets_exposed=len(leaks))
    scenario.metrics["outputs_searched"] = len(runs) * 2 + len(left)
    scenario.metrics["commands_run"] = list(runs)
    scenario.metrics["recorded_errors"] = sorted(
        {(r.last_error or "")[:200] for r in s.store.list_tasks()}
    )
    scenario.metrics["cli_error_lines"] = {
        name: w.stderr().strip().splitlines()[-1][:200]
        for name, w in runs.items()
        if w.proc.returncode == 2 and w.stderr().strip()
    }

    assert s.oracle.isdisjoint(s3_warehouse.files())
    scenario.check("the S3 table was swept with the keys taken from the environment")
    errors = {r.name: r.last_error or "" for r in s.store.list_tasks()}
    assert "Could not connect" in errors.get("unreachable endpoint", "")
    assert "outside the table location" in errors.get("outside the location", "")
    for name in (
        "unreachable database",
        "unreachable database, password in the query",
        "config with a YAML error",
    ):
        assert runs[name].proc.returncode == 2, runs[name].stderr()
    for name in ("tasks list, password in the query", "init-metastore, password in the query"):
        assert runs[name].proc.returncode == 0, runs[name].stderr()
    assert "?password=***&sslpassword=***" in runs["init-metastore, password in the query"].stdout()
    assert UNSET_ENV in runs["config naming an unset variable"].stderr()
    scenario.check(
        "the failure cases really failed (unreachable endpoint recorded on its task, "
        "unreachable or unknown database, YAML error, unset variable named by name)"
    )
    assert not leaks, leaks
    scenario.check(
        "neither the database password (raw or URL-encoded, in the URL's userinfo or its "
        "query) nor the S3 key or secret nor the Azure account key appears in any stdout or "
        "stderr (verbose too, JSON too, the header naming the metastore) or task row"
    )


@pytest.mark.scenario(8, "Secrets: Dagster run tags, run config, event logs and the UI snapshot")
def test_no_secret_in_dagster_runs(
    secret_setup: Setup,
    pg_role: PgRole,
    workers: Workers,
    scenario: Scenario,
    s3_warehouse: Warehouse,
) -> None:
    from dagster._serdes import serialize_value

    s = secret_setup
    home = s.tmp / "dagster"
    home.mkdir()
    snapshot = s.tmp / "repository-snapshot.json"
    env = {
        **s.env,
        # The password in the query: the spelling a userinfo-only mask missed.
        "POLARIS_METASTORE_URL": query_url(pg_role),
        "POLARIS_PIPELINE_STORAGE_CONFIG": str(s.config_path),
        "POLARIS_PIPELINE_GRACE_MS": "0",
        "POLARIS_PIPELINE_MAX_ATTEMPTS": "1",
        "POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS": "0",
    }
    scenario.load = LOAD
    scenario.fault = (
        "the deployed code location (definitions.defs, URL and storage config from the "
        "environment): sensor ticks and runs until nothing is left to lease; the failing "
        "tasks fail their runs"
    )
    w = workers.start(
        "dagster",
        "dagster",
        env=env,
        dagster_home=str(home),
        until="idle",
        fast_retries=True,
        snapshot_out=str(snapshot),
        deadline_s=240,
    )
    assert w.wait(240) == 0, w.stderr()[-3000:]

    leaks: list[str] = []
    searched = 0
    with temp_instance(home) as inst:
        runs = inst.get_runs()
        for run in runs:
            leaks += s.leaks_in(f"run {run.run_id} tags", json.dumps(run.tags))
            leaks += s.leaks_in(f"run {run.run_id} config", json.dumps(run.run_config))
            for entry in inst.all_logs(run.run_id):
                leaks += s.leaks_in(f"run {run.run_id} event", serialize_value(entry))
                searched += 1
    leaks += s.leaks_in("worker stdout", w.stdout())
    leaks += s.leaks_in("worker stderr", w.stderr())
    leaks += s.leaks_in("repository snapshot (UI)", snapshot.read_text(encoding="utf-8"))
    leaks += s.leaks_in_rows()
    failed = [r for r in runs if not r.is_success]
    scenario.losses(secrets_exposed=len(leaks))
    scenario.metrics.update(
        {"dagster_runs": len(runs), "failed_runs": len(failed), "event_records_searched": searched}
    )
    assert s.oracle.isdisjoint(s3_warehouse.files())
    assert len(failed) >= 2  # the unreachable endpoint and the refused path
    assert "POLARIS_METASTORE_URL" in snapshot.read_text(encoding="utf-8")
    scenario.check(
        f"{len(runs)} runs ({len(failed)} failed) swept the table and recorded the failures; "
        "the UI snapshot names the URL's variable, not its value"
    )
    assert not leaks, leaks
    scenario.check(
        "no secret in any run's tags or config, any event record (messages, metadata, "
        "failures), the worker's stdout/stderr, the repository snapshot the UI reads, or "
        "the task rows"
    )
