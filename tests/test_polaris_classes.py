"""The rows we write, judged by Polaris releases' own classes (tests/support/polaris_classes.py).

No Polaris server can be assembled from the registry, so each release's polaris-core (and, at
1.4.1, the handlers' payload records from polaris-runtime-service) runs in our small Java harness
(tests/polaris/harness): TaskEntity.getTaskType, PolarisObjectMapperUtil.parseTaskState,
TaskEntity.readData into the class the release's handler reads, and the metastore managers'
own loadTasks over Polaris's in-memory TreeMap persistence holding copies of the rows.

Per release, on a schema of the version that release bootstraps, one scenario written by our
code: a dropped table's cleanup task executed by our Runner (its MANIFEST and BATCH children
stay, leased by the Runner), a task we leased and hold, a task whose failed attempt we wrote
back. The Polaris release is configured (TaskPolicy.polaris_version), so the rows are
written for the release that judges them. A release that does not install fails its tests
with the installer's one line; a check whose Polaris class a release does not serve is
skipped with a reason starting "not served:" (tests/support/polaris_report.py reports it
as not served, never as passed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.postgres import database_url, throwaway_database
from builders.tasks import batch_task
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import location_within, same_location
from polaris_pipeline.tasks.model import TaskPolicy, TaskType
from tests.support.iceberg import Warehouse, recorded_drop_task
from tests.support.metastore import pipeline_store
from tests.support.polaris_classes import (
    BATCH_TYPED,
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
    # Polaris's loadTasks at the JVM's clock right after our code wrote the rows, and at
    # that clock plus POLARIS_TASK_TIMEOUT_MILLIS + 1 ms: per manager, the ids it leases.
    leased_now: dict[str, list[int]] = field(default_factory=dict)
    leased_after_timeout: dict[str, list[int]] = field(default_factory=dict)

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
    decoders = {
        answer["manifest"].get("decoder")
        for answer in scenario.described.values()
        if "manifest" in answer
    }
    props.append(("polaris_fact:MANIFEST bytes decoded by", ", ".join(sorted(map(str, decoders)))))
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
    table = warehouse.build("t", partitioned=True, with_statistics=True, with_deletes=True)
    with throwaway_database("pp_polaris_classes") as name:
        url = database_url(name)
        policy = TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, polaris_version=release)
        store = pipeline_store(url, policy, schema_version=SCHEMA_VERSION[release])
        try:
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
            # At once, at the real clock: the held task and the children are ours now.
            leased_now = harness.lease(url, REALM, None)
            leased_after = harness.lease(url, REALM, None, after_ms=POLARIS_TASK_TIMEOUT_MS + 1)
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
                leased_now=leased_now,
                leased_after_timeout=leased_after,
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


NOT_SERVED_RUNTIME = (
    "not served: the release's polaris-runtime-service (the handlers and their payload "
    "records) is not served by Maven Central"
)


def test_child_payloads_decode_with_the_release_handler_records(scenario: Scenario) -> None:
    """Our MANIFEST and BATCH children decode with the release's own handler payload
    records (ManifestCleanupTask, BatchFileCleanupTask), and a BATCH row with `type` is
    refused, where the release's polaris-runtime-service is served (1.4.1)."""
    harness = scenario.ready()
    for child in scenario.children:
        assert scenario.described[child]["data"]["available"] is harness.runtime_service
    if not harness.runtime_service:
        pytest.skip(NOT_SERVED_RUNTIME)
    for child, kind in scenario.children.items():
        data = scenario.described[child]["data"]
        assert data["ok"], data
        if kind == BATCH:
            assert data["value"]["batchFiles"], data
    assert scenario.typed
    for answer in scenario.typed.values():  # a row WITH "type": the record refuses it
        data = answer["data"]
        assert data["available"] and not data["ok"], data
        assert 'Unrecognized field "type"' in data["error"], data


def test_batch_children_follow_the_release_type_rule(scenario: Scenario) -> None:
    """Every BATCH child we write for the release carries `type` (TABLE_METADATA) exactly
    where the release reads one: 1.7 and later need it, 1.0 to 1.6 refuse it
    (tests/polaris/releases; at 1.4.1 also decoded by the release's own record)."""
    scenario.ready()
    typed = BATCH_TYPED[scenario.release]
    batches = [c for c, kind in scenario.children.items() if kind == BATCH]
    assert batches
    for child in batches:
        payload = json.loads(scenario.rows[child]["data"])
        assert ("type" in payload) is typed, payload
        if typed:
            assert payload["type"] == "TABLE_METADATA", payload


def test_manifest_bytes_decode_as_the_release_handler_decodes_them(scenario: Scenario) -> None:
    """Each MANIFEST child's manifestFileData decodes with the release's
    TaskUtils.decodeManifestFileData where served (1.4.1), else with what that method
    calls (Base64, then ManifestFiles.decode of the release's Iceberg), to the manifest
    the child names: its path, its length on disk, its content (data or deletes)."""
    scenario.ready()
    manifests = [c for c, kind in scenario.children.items() if kind == MANIFEST]
    contents = set()
    assert manifests
    for child in manifests:
        decoded = scenario.described[child]["manifest"]
        assert decoded["ok"], decoded
        path = decoded["path"]
        assert f"_{path}_" in scenario.described[child]["name"], decoded
        assert decoded["length"] == Path(path.removeprefix("file:")).stat().st_size, decoded
        contents.add(decoded["content"])
    assert contents == {"DATA", "DELETES"}  # the table has a delete manifest


def test_polaris_leases_nothing_we_hold_at_the_real_clock(scenario: Scenario) -> None:
    """Right after our code wrote them, the release's loadTasks at the real clock leases
    neither the task we hold nor any child we created leased; at that clock plus its
    task timeout (300000 ms) + 1 ms it leases every one of them (both managers)."""
    scenario.ready()
    ours = {scenario.held, *scenario.children}
    for manager in ("transactional", "atomic"):
        assert not ours & set(scenario.leased_now[manager]), scenario.leased_now
        assert ours <= set(scenario.leased_after_timeout[manager]), scenario.leased_after_timeout


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


# Spellings of locations, each pair (a, b) judged by our storage/uri.py (same_location,
# location_within) and by the release's StorageLocation (a.isChildOf(b), both ways).
LOCATION_PAIRS = [
    ("file:/wh/ns/t", "/wh/ns/t"),
    ("file:///wh/ns/t", "/wh/ns/t"),
    ("file:/wh/ns/t/", "file:///wh/ns/t"),
    ("//wh/ns/t", "/wh/ns/t"),
    ("file://localhost/wh/ns/t", "file:///wh/ns/t"),
    ("s3://b/wh/t", "s3a://b/wh/t"),
    ("s3://b/wh/t/", "s3://b/wh/t"),
    ("s3n://b/wh/t", "s3://b/wh/t"),
    ("S3://b/wh/t", "s3://b/wh/t"),
    ("gs://b/wh/t", "gs://b/wh/t/"),
    ("gcs://b/wh/t", "gs://b/wh/t"),
    ("abfss://c@a.dfs.core.windows.net/wh/t", "abfs://c@a.dfs.core.windows.net/wh/t"),
    ("wasbs://c@a.blob.core.windows.net/wh/t", "abfss://c@a.dfs.core.windows.net/wh/t"),
    ("/wh/ns/t_2", "/wh/ns/t"),
    ("s3://b/wh/t", "s3://c/wh/t"),
    ("/wh/ns//t", "/wh/ns/t"),
    ("/wh/ns/./t", "/wh/ns/t"),
    ("/wh/ns/t/data/f.parquet", "/wh/ns/t"),
    ("s3a://b/wh/t/x", "s3://b/wh/t"),
    ("/wh/ns/t_2/x", "/wh/ns/t"),
    ("abfss://c@a.dfs.core.windows.net/wh/t/x", "wasbs://c@a.blob.core.windows.net/wh/t"),
    ("abfss://d@a.dfs.core.windows.net/wh/t/x", "abfss://c@a.dfs.core.windows.net/wh/t"),
]
# Where we equate more spellings than the release's StorageLocation, and why. Each makes
# our overlap and shared-location checks stricter (one more spelling of a live table is
# refused); no path Polaris's rule keeps outside a location is inside it by ours.
LOCATION_DIFFERENCES = {
    ("file://localhost/wh/ns/t", "file:///wh/ns/t"): (
        "RFC 8089: `localhost` names the local host; Polaris compares the text"
    ),
    ("s3n://b/wh/t", "s3://b/wh/t"): (
        "one bucket through Hadoop's s3n; Polaris's StorageLocation knows s3 and s3a only"
    ),
    ("S3://b/wh/t", "s3://b/wh/t"): (
        "RFC 3986 3.1: a scheme is case-insensitive; Polaris compares it as written"
    ),
    ("gcs://b/wh/t", "gs://b/wh/t"): (
        "fsspec serves gcs:// as gs://; Polaris compares the text (no GCS location class)"
    ),
}
# 1.0 has no S3Location: s3 and s3a compare as text there (1.1 and later equate them).
LOCATION_DIFFERENCES_BEFORE_S3LOCATION = {
    ("s3://b/wh/t", "s3a://b/wh/t"): "1.0's StorageLocation has no S3Location (s3a is s3 from 1.1)",
    (
        "s3a://b/wh/t/x",
        "s3://b/wh/t",
    ): "1.0's StorageLocation has no S3Location (s3a is s3 from 1.1)",
}


def _location_differences(release: str) -> dict[tuple[str, str], str]:
    if release.startswith("1.0."):
        return {**LOCATION_DIFFERENCES, **LOCATION_DIFFERENCES_BEFORE_S3LOCATION}
    return dict(LOCATION_DIFFERENCES)


def test_location_spellings_agree_with_storage_location(
    scenario: Scenario, request: pytest.FixtureRequest
) -> None:
    """Every spelling pair of LOCATION_PAIRS is judged the same location, and inside or
    not, by our storage/uri.py and by the release's polaris-core StorageLocation, except
    the differences this test names, each with its reason (listed on this page)."""
    harness = scenario.ready()
    differing = {}
    for answer in harness.locations(LOCATION_PAIRS):
        pair = (answer["a"], answer["b"])
        assert "error" not in answer, answer
        polaris = (answer["aChildOfB"] and answer["bChildOfA"], answer["aChildOfB"])
        ours = (same_location(*pair), location_within(*pair))
        if polaris != ours:
            differing[pair] = f"ours same/within {ours}, Polaris {polaris}"
    expected = _location_differences(scenario.release)
    for (a, b), reason in expected.items():
        request.node.user_properties.append(
            (f"polaris_difference:location `{a}` against `{b}`: ours judges more alike", reason)
        )
    assert differing.keys() == expected.keys(), differing
