"""Dagster fixtures shared by the tests of the code location."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from dagster import DagsterInstance, Definitions, ExecuteInProcessResult, SensorDefinition
from sqlalchemy.engine import make_url

from builders.postgres import PG_ADMIN_URL, database_url, throwaway_database
from polaris_pipeline.dagster.alert_delivery import Destinations, destinations_of
from polaris_pipeline.dagster.alerts import alert_sensors
from polaris_pipeline.dagster.backlog import BacklogSettings
from polaris_pipeline.dagster.contract import run_config_for
from polaris_pipeline.dagster.definitions import build_defs
from polaris_pipeline.dagster.realm_backfill import OP_NAME as REALM_BACKFILL_OP
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
    clear_metastore_cache,
    clear_storage_cache,
)
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import AlertSection
from polaris_pipeline.settings.env import read_section


@pytest.fixture(scope="session", autouse=True)
def _alembic_scripts_read_once() -> Iterator[None]:
    """Each migration directory's scripts read once per test process, not at every check.

    Dagster checks and stamps a SQLite database's alembic revision each time it opens
    its run, event and schedule storage, and for every run's event shard, loading its
    90 migration scripts each time: 0.25 of the 0.35 s of CPU an instance took, and
    0.06 s of every run. The scripts do not change while the tests run; the databases
    are still created, checked and stamped as before."""
    read = ScriptDirectory.from_config
    scripts: dict[tuple[str | None, str | None], ScriptDirectory] = {}

    def read_once(config: AlembicConfig) -> ScriptDirectory:
        key = (config.config_file_name, config.get_main_option("script_location"))
        if key not in scripts:
            scripts[key] = read(config)
        return scripts[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ScriptDirectory, "from_config", read_once)
        yield


@pytest.fixture(autouse=True)
def _fresh_resource_caches() -> Iterator[None]:
    """Resources cache engines per process; a test must not see the previous test's."""
    yield
    clear_metastore_cache()
    clear_storage_cache()


# Every instance a test makes reports nothing to Dagster's telemetry.
NO_TELEMETRY: Mapping[str, Any] = {"telemetry": {"enabled": False}}

# The compute log manager of a test instance that does not ask for captured logs: none.
# Dagster's default (LocalComputeLogManager) starts a `tail` and a Python watcher process
# for each step; only tests/test_retention.py reads the files (it deletes them).
NO_CAPTURED_LOGS: Mapping[str, Any] = {
    "compute_logs": {
        "module": "dagster._core.storage.noop_compute_log_manager",
        "class": "NoOpComputeLogManager",
    }
}


def temp_instance(
    home: Path,
    *,
    postgres_url: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    capture_logs: bool = False,
) -> DagsterInstance:
    """A real Dagster instance in DAGSTER_HOME ``home`` (made if missing), telemetry off.

    Its run, event and schedule storage are SQLite files in ``home``, or the PostgreSQL
    database at ``postgres_url`` (a psycopg2 URL, see ``dagster_postgres_url``);
    ``overrides`` are further dagster.yaml sections (a compute log manager, say).
    Steps' stdout and stderr are captured (Dagster's default compute log manager) only
    with ``capture_logs``.
    Use it as a context manager; the ``instance`` fixture is the common case.
    """
    home.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        **NO_TELEMETRY,
        **({} if capture_logs else NO_CAPTURED_LOGS),
        **(overrides or {}),
    }
    if postgres_url is not None:
        config["storage"] = {"postgres": {"postgres_url": postgres_url}}
    if not STORAGE_KEYS & set(config):
        _copy_empty_storage(home)
    return DagsterInstance.local_temp(str(home), overrides=config)


# The dagster.yaml sections that move an instance's storage out of its home's SQLite files.
STORAGE_KEYS = frozenset({"storage", "run_storage", "event_log_storage", "schedule_storage"})
# Where an instance keeps its SQLite files in its home: runs, the event log's index, schedules.
SQLITE_STORAGE_DIRS = ("history", "schedules")


@functools.cache
def empty_sqlite_storage() -> Path:
    """A home whose SQLite storage Dagster created for an empty instance, once per process.

    Creating the run, event-log index and schedule databases, their tables and alembic
    stamps costs about 0.12 s of CPU; copying this one's files, 0.02 s, for each of the
    ~170 tests of ``make test-fast`` that make an instance (measured 2026-12-07). The
    files are the ones Dagster writes for a new instance, and each test gets its own
    copy."""
    home = Path(tempfile.mkdtemp(prefix="pp-dagster-storage-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    DagsterInstance.local_temp(str(home), overrides={**NO_TELEMETRY, **NO_CAPTURED_LOGS}).dispose()
    return home


def _copy_empty_storage(home: Path) -> None:
    """Put an empty instance's SQLite files in ``home``, unless it has storage already."""
    if any((home / name).exists() for name in SQLITE_STORAGE_DIRS):
        return
    for name in SQLITE_STORAGE_DIRS:
        shutil.copytree(empty_sqlite_storage() / name, home / name)


def dagster_postgres_url(database: str) -> str:
    """The URL of ``database`` as dagster-postgres takes it (psycopg2; ours is psycopg 3)."""
    return database_url(database, drivername="postgresql+psycopg2")


def dagster_home(path: Path) -> Path:
    """A DAGSTER_HOME for a ``dagster`` subprocess: ``path``, made, with telemetry off."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").write_text(yaml.safe_dump(dict(NO_TELEMETRY)))
    return path


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[DagsterInstance]:
    """A real Dagster instance on SQLite storage in a temporary DAGSTER_HOME."""
    with temp_instance(tmp_path / "dagster_home") as inst:
        yield inst


@pytest.fixture
def dagster_pg_env() -> Iterator[dict[str, str]]:
    """DAGSTER_PG_* (as both deploy/*.yaml read them) for a database made for one test."""
    admin_url = make_url(PG_ADMIN_URL)
    with throwaway_database("pp_dagster") as name:
        yield {
            "DAGSTER_PG_HOST": admin_url.host or "127.0.0.1",
            "DAGSTER_PG_PORT": str(admin_url.port or 5432),
            "DAGSTER_PG_USERNAME": admin_url.username or "postgres",
            "DAGSTER_PG_PASSWORD": admin_url.password or "",
            "DAGSTER_PG_DB": name,
        }


def child_summaries(result: Any, node: str) -> list[dict[str, Any]]:
    """Per-task summaries of a child stage's steps (each step runs a group of children)."""
    groups = result.output_for_node(node)
    return [task for group in groups.values() for task in group["tasks"]]


# A section that is a block inside another's in a deployment: the guard bounds the
# checks of the metastore resource's store, so it is that resource's ``guard`` block.
NESTED_IN = {"guard": "metastore"}


def deployed_section(resources: Mapping[str, Any], section: str) -> Any:
    """The object a deployment's ``resources`` hold for ``section``: its resource, or the
    block of the resource it is nested in."""
    if section in NESTED_IN:
        return getattr(resources[NESTED_IN[section]], section)
    return resources[section]


def metastore_resource(store: Metastore, **overrides: Any) -> PolarisMetastoreResource:
    """The Dagster resource over the same database and lease policy as ``store``."""
    policy = store.policy
    values: dict[str, Any] = {
        "url": store.url.render_as_string(hide_password=False),
        "lease_timeout_ms": policy.lease_timeout_ms,
        "grace_ms": policy.grace_ms,
        "max_attempts": policy.max_attempts,
        **overrides,
    }
    return PolarisMetastoreResource(**values)


def alert_section(env: Mapping[str, str]) -> AlertSection:
    """The environment's alerts section (the settings' one reading of it)."""
    section = read_section("alerts", env)
    assert isinstance(section, AlertSection)
    return section


def ui_url_from_env(env: Mapping[str, str]) -> str | None:
    """The Dagster UI address alerts link to (``POLARIS_PIPELINE_ALERT_UI_URL``), if set."""
    return alert_section(env).ui_url


def notifier_from_env(env: Mapping[str, str]) -> Destinations | None:
    """The configured destinations (a ``Notify``); None when none is configured."""
    return destinations_of(alert_section(env))


def alert_sensors_from_env(env: Mapping[str, str]) -> list[SensorDefinition]:
    """Both alert sensors as ``build_defs_from_env`` configures them from ``env``."""
    return alert_sensors(alert_section(env))


@functools.cache
def _deployed_defs() -> Definitions:
    return build_defs()


def deployed_sensor(name: str) -> SensorDefinition:
    """The sensor ``name`` as ``build_defs`` deploys it, so that a test evaluates what a
    deployment runs (its required resources included), not a sensor of its own making."""
    return _deployed_defs().resolve_sensor_def(name)


def sweeper_resources(
    metastore: PolarisMetastoreResource,
    sweeper: SweeperSettings | None = None,
    *,
    storage: PolarisStorageResource | None = None,
    backlog: BacklogSettings | None = None,
) -> dict[str, Any]:
    """Every resource the deployed sweeper requires: those given, the rest at their defaults."""
    return {
        "metastore": metastore,
        "sweeper": sweeper or SweeperSettings(),
        "storage": storage or PolarisStorageResource(),
        "backlog": backlog or BacklogSettings(),
    }


def realm_run_config(realm: str, **bounds: Any) -> dict[str, Any]:
    """The backfill job's run config for ``realm`` (``bounds``: other RealmSweepConfig fields)."""
    return {"ops": {REALM_BACKFILL_OP: {"config": {"realm": realm, **bounds}}}}


def run_task_job(
    store: Metastore,
    instance: DagsterInstance,
    task_id: int,
    allowed_prefixes: list[str],
    *,
    entity_version: int = 1,
    realm: str = "POLARIS",
    **metastore_overrides: Any,
) -> ExecuteInProcessResult:
    """One run of ``polaris_task_job`` for ``task_id`` in process (errors kept in the
    result), deleting only under ``allowed_prefixes``."""
    return polaris_task_job.execute_in_process(
        run_config=run_config_for(realm, task_id, entity_version=entity_version),
        instance=instance,
        resources={
            "metastore": metastore_resource(store, **metastore_overrides),
            "storage": PolarisStorageResource(allowed_prefixes=allowed_prefixes),
        },
        raise_on_error=False,
    )
