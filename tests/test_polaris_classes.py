"""The rows we write, judged by Polaris releases' own classes (tests/support/polaris_classes.py).

No Polaris server can be assembled from the registry, so each release's polaris-core (and, at
1.4.1, the handlers' payload records from polaris-runtime-service) runs in our small Java harness
(tests/polaris/harness): TaskEntity.getTaskType, PolarisObjectMapperUtil.parseTaskState,
TaskEntity.readData into the class the release's handler reads, and the metastore managers'
own loadTasks over Polaris's in-memory TreeMap persistence holding copies of the rows.

Per release, on a schema of the version that release bootstraps, one scenario written by our
code: a dropped table's cleanup task executed by our Runner (its MANIFEST and BATCH children
stay, leased by the Runner), a task we leased and hold, a task whose failed attempt we wrote
back. A release that does not install fails its tests with the installer's one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.postgres import database_url, throwaway_database
from builders.tasks import batch_task
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import TaskPolicy, TaskType
from tests.support.iceberg import Warehouse, recorded_drop_task
from tests.support.polaris_classes import (
    POLARIS_TASK_TIMEOUT_MS,
    RELEASES,
    SCHEMA_VERSION,
    InstallError,
    PolarisHarness,
    install,
)

pytestmark = pytest.mark.slow

REALM = "POLARIS"
TYPED_REALM = "TYPED"  # a BATCH row written with "type", kept apart from the scenario
ENTITY, MANIFEST, BATCH = (t.name for t in TaskType)


@dataclass
class Scenario:
    release: str
    install_error: str | None = None
    harness: PolarisHarness | None = None
    url: str = ""
    executor: str = ""
    held: int = 0
    failed: int = 0
    children: dict[int, str] = field(default_factory=dict)  # id -> task type name
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> our properties
    described: dict[int, dict[str, Any]] = field(default_factory=dict)
    typed: dict[int, dict[str, Any]] = field(default_factory=dict)

    def ready(self) -> PolarisHarness:
        if self.install_error is not None:
            pytest.fail(self.install_error, pytrace=False)
        assert self.harness is not None
        return self.harness


@pytest.fixture(scope="module", params=RELEASES, ids=lambda release: f"polaris-{release}")
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _report_release(request: pytest.FixtureRequest, release: str, scenario: Scenario) -> None:
    """tests/support/polaris_report.py counts the outcomes per release from this, and
    docs/polaris-compatibility.md lists the facts."""
    props = request.node.user_properties
    props.append(("polaris_release", release))
    props.append(("polaris_fact:schema version it bootstraps", SCHEMA_VERSION[release]))
    if scenario.harness is None:
        props.append(("polaris_fact:installed", scenario.install_error or "no"))
        return
    served = scenario.harness.runtime_service
    props.append(("polaris_fact:handlers' payload records served", "yes" if served else "no"))
    for answer in scenario.typed.values():
        data = answer["data"]
        verdict = "decodes" if data.get("ok") else "refused (Unrecognized field)"
        props.append(("polaris_fact:a BATCH row with `type`", verdict))


@pytest.fixture(scope="module")
def scenario(release: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    try:
        directory = install(release)
    except InstallError as exc:
        yield Scenario(release, install_error=str(exc))
        return
    harness = PolarisHarness(release, directory)
    tmp = tmp_path_factory.mktemp("polaris-classes")
    uri = built_tables.local_warehouse_uri(tmp / "wh")
    catalog = built_tables.open_catalog(uri, tmp / "catalog.db", name="local")
    config = StorageConfig()
    warehouse = Warehouse("local", uri, catalog, config, StorageResolver(config))
    table = warehouse.build("t", partitioned=True, with_statistics=True)
    with throwaway_database("pp_polaris_classes") as name:
        url = database_url(name)
        store = Metastore(url, policy=TaskPolicy(lease_timeout_ms=60_000, grace_ms=0))
        try:
            store.init_schema(SCHEMA_VERSION[release])
            parent = built_tasks.drop_table_task(table)
            held = recorded_drop_task(f"{uri}/ns/held/metadata/0-a.metadata.json", name="held")
            failed = recorded_drop_task(f"{uri}/ns/gone/metadata/0-b.metadata.json", name="gone")
            store.insert_tasks([parent, held, failed])
            with Runner(store, config, resolver=warehouse.resolver) as runner:
                leases = {lease.task_id: lease for lease in runner.lease(10, [REALM])}
                assert set(leases) == {parent.id, held.id, failed.id}
                assert not runner.record_failure(leases[failed.id], "an attempt that failed").ok
                outcome = runner.execute(leases[parent.id])
                assert outcome.ok, outcome
                executor = runner.executor_id
            children = {
                child.task_id: TaskType(int(child.task_type_code or 0)).name
                for child in outcome.children
            }
            store.insert_tasks([batch_task(TYPED_REALM, ["file:///nowhere/ns/t/a.avro"])])
            rows = {task.id: dict(task.properties) for task in store.list_tasks()}
            yield Scenario(
                release,
                harness=harness,
                url=url,
                executor=executor,
                held=held.id,
                failed=failed.id,
                children=children,
                rows=rows,
                described=harness.describe(url, REALM),
                typed=harness.describe(url, TYPED_REALM) if harness.runtime_service else {},
            )
        finally:
            store.dispose()


def test_every_row_we_write_decodes_with_the_release_task_entity(scenario: Scenario) -> None:
    """Leases, a failed attempt and a purge's children, as our code writes them: the
    release's TaskEntity names their type, parseTaskState reads our lease properties, and a
    dropped entity decodes as the class the release's TableCleanupTaskHandler reads."""
    scenario.ready()
    described = scenario.described
    assert set(described) == {scenario.held, scenario.failed, *scenario.children}
    assert set(scenario.children.values()) == {MANIFEST, BATCH}
    for task_id, answer in described.items():
        assert "taskEntityError" not in answer and "taskTypeError" not in answer, answer
        expected = scenario.children.get(task_id, ENTITY)
        assert answer["taskType"] == expected, answer
        state = answer["state"]
        assert state is not None, answer  # parseTaskState read the properties
        props = scenario.rows[task_id]
        assert state["executor"] == props.get("lastAttemptExecutorId"), answer
        assert state["lastAttemptStartTime"] == int(props.get("lastAttemptStartTime", "0"))
        assert state["attemptCount"] == int(props.get("attemptCount", "0"))
        if expected == ENTITY:
            data = answer["data"]
            assert data["ok"], data  # the dropped entity, as TableCleanupTaskHandler reads it
            assert data["value"]["typeCode"] == 7 and data["value"]["subTypeCode"] == 2
    held = described[scenario.held]["state"]
    assert held["executor"] == scenario.executor and held["attemptCount"] == 1
    assert held["lastAttemptStartTime"] > 0
    for child in scenario.children:  # created leased by the Runner that made them
        assert described[child]["state"]["executor"] == scenario.executor


def test_child_payloads_decode_with_the_release_handler_records(scenario: Scenario) -> None:
    """Where the release's handlers are served (1.4.1): our MANIFEST and BATCH children
    decode with its own payload records, and a BATCH row with `type` is refused."""
    harness = scenario.ready()
    for child, kind in scenario.children.items():
        data = scenario.described[child]["data"]
        assert data["available"] is harness.runtime_service, data
        if not harness.runtime_service:
            continue
        assert data["ok"], data  # our child rows carry no "type" below schema v5
        assert "type" not in scenario.rows[child]["data"]
        if kind == BATCH:
            assert data["value"]["batchFiles"], data
    for answer in scenario.typed.values():  # a row WITH "type": the record refuses it
        data = answer["data"]
        assert data["available"] and not data["ok"], data
        assert 'Unrecognized field "type"' in data["error"], data


def test_polaris_leases_a_task_we_hold_only_after_its_timeout(scenario: Scenario) -> None:
    """The release's own loadTasks (both metastore managers) leaves a task we hold alone
    at lastAttemptStartTime + 300000 ms and leases it 1 ms later."""
    harness = scenario.ready()
    start = scenario.described[scenario.held]["state"]["lastAttemptStartTime"]
    at_timeout = harness.lease(scenario.url, REALM, start + POLARIS_TASK_TIMEOUT_MS)
    after = harness.lease(scenario.url, REALM, start + POLARIS_TASK_TIMEOUT_MS + 1)
    for manager in ("transactional", "atomic"):
        assert scenario.held not in at_timeout[manager], at_timeout
        assert scenario.held in after[manager], after
