"""One location rule, every spelling (issue 26).

``polaris_pipeline.storage.uri`` holds the rule Polaris applies (``StorageLocation``,
``S3Location``, ``AzureLocation``): ``file:/x``, ``file:///x`` and ``/x`` are one
location, so are ``s3://b/k`` and ``s3a://b/k``, and abfs/wasb spellings of one
container; a trailing slash never matters; "under" stops at a ``/`` boundary.
Every check that compares locations uses it: the recorded root against the
metadata file's ``location``, the path guard, ``allowedLocations``, the scope of
vended credentials, the dry-run plan. Each is driven here on real pyiceberg
tables (local, moto S3 with IAM, Azurite, fake-gcs-server), through the Runner,
the CLI's ``sweep`` and the Dagster job; each equivalent pair is tried in
both directions, and each look-alike must be refused with its reason recorded.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, SensorResult, build_sensor_context
from pyiceberg.table import Table

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.cleanup.guard.paths import PathGuard
from polaris_pipeline.cli import main
from polaris_pipeline.dagster.resources import PolarisStorageResource, SweeperSettings
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.execution.runner import Runner, Status, TaskOutcome
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY, decode_storage_config
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.credentials.azure import parse_location as azure_location_of
from polaris_pipeline.storage.credentials.gcs import EMULATOR_ENV, boundary_rules
from polaris_pipeline.storage.credentials.s3 import session_policy
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.scope import task_scope
from polaris_pipeline.storage.uri import location_within, same_location, split_uri
from polaris_pipeline.tasks.model import NewTask, bounded_error
from tests.support.azurite import ACCOUNT, Azurite, azurite  # noqa: F401
from tests.support.catalog_storage import (
    aws_storage_info,
    azure_storage_info,
    azurite_table,
    catalog_sweep,
    fake_gcs_table,
    gcs_storage_info,
    iam_s3_table,
)
from tests.support.dagster import deployed_sensor, metastore_resource, sweeper_resources
from tests.support.gcs import FakeGcs, fake_gcs  # noqa: F401
from tests.support.iceberg import BUILT_NEIGHBOUR, BUILT_TABLE, Warehouse, table_files
from tests.support.s3 import MotoIam

OLD_MS = 10 * 60_000

# -- the rule ------------------------------------------------------------------------

EQUIVALENT = [
    ("file:/wh/ns/t", "file:///wh/ns/t"),
    ("/wh/ns/t", "file:///wh/ns/t"),
    ("/wh/ns/t", "file:/wh/ns/t"),
    ("file:/wh/ns/t/", "/wh/ns/t"),
    ("//wh/ns/t", "file:///wh/ns/t"),  # Polaris folds a leading "/+" too
    ("file://localhost/wh/ns/t", "file:///wh/ns/t"),
    ("s3://b/wh/ns/t", "s3a://b/wh/ns/t"),
    ("s3://b/wh/ns/t/", "s3a://b/wh/ns/t"),
    ("s3n://b/wh/ns/t", "s3://b/wh/ns/t"),
    ("S3A://b/wh/ns/t", "s3://b/wh/ns/t"),
    ("gcs://b/wh/ns/t", "gs://b/wh/ns/t"),
    ("abfss://c@acct.dfs.core.windows.net/wh/t", "abfs://c@acct.dfs.core.windows.net/wh/t"),
    ("abfss://c@acct.dfs.core.windows.net/wh/t", "wasbs://c@acct.blob.core.windows.net/wh/t/"),
    ("wasb://c@acct.blob.core.windows.net/wh/t", "abfs://c@acct.dfs.core.windows.net/wh/t"),
]
LOOK_ALIKES = [
    ("file://host/wh/ns/t", "file:///wh/ns/t"),  # an authority: no location
    ("file://host/wh/ns/t", "file:///host/wh/ns/t"),
    ("file://host/wh/ns/t", "file://host/wh/ns/t"),
    ("s3://b/wh/ns/t", "s3://b2/wh/ns/t"),
    ("s3://b/wh/ns/t", "gs://b/wh/ns/t"),
    ("file:///b/wh/ns/t", "s3://b/wh/ns/t"),
    ("s3://b/wh/ns/t", "s3://b/wh/ns/t_2"),
    ("s3://b/wh/ns/t", "s3://b/wh/ns"),
    ("s3://b/wh/ns", "s3://b/wh/ns/t/%2e%2e"),  # nothing is decoded
    ("s3://b/wh/ns/t", "s3://b/wh/ns/%74"),
    ("s3://b/wh/ns/t", "s3://b/wh/x/../ns/t"),
    ("abfs://c@acct.dfs.core.windows.net/wh/t", "abfs://d@acct.dfs.core.windows.net/wh/t"),
    ("abfs://c@acct.dfs.core.windows.net/wh/t", "abfs://c@other.dfs.core.windows.net/wh/t"),
    ("", ""),
]


@pytest.mark.parametrize(("a", "b"), EQUIVALENT)
def test_equivalent_spellings_are_one_location_both_ways(a: str, b: str) -> None:
    assert same_location(a, b) and same_location(b, a)
    assert location_within(a, b) and location_within(b, a)
    assert location_within(f"{a.rstrip('/')}/data/f.parquet", b)
    assert location_within(f"{b.rstrip('/')}/data/f.parquet", a)


@pytest.mark.parametrize(("a", "b"), LOOK_ALIKES)
def test_look_alikes_are_not_one_location(a: str, b: str) -> None:
    assert not same_location(a, b) and not same_location(b, a)


def test_under_stops_at_a_slash_and_whole_schemes_contain_their_own() -> None:
    assert location_within("s3a://b/wh/t/x", "s3://b/wh/t")
    assert not location_within("s3://b/wh/t_2/x", "s3://b/wh/t")
    assert not location_within("s3://b/wh/t", "s3://b/wh/t/x")
    assert location_within("s3a://any/x", "s3://") and not location_within("gs://any/x", "s3://")
    assert location_within("file:/any/x", "file:///") and location_within("/any", "/")
    assert not location_within("file://host/x", "file:///")


# -- each check, as data ------------------------------------------------------------

_AWS = {
    "@type": "AwsStorageConfigurationInfo",
    "roleARN": "arn:aws:iam::123456789012:role/catalog",
}


@pytest.mark.parametrize(
    ("allowed", "location"),
    [
        ("s3a://b/wh", "s3://b/wh/ns/t"),
        ("s3://b/wh/", "s3a://b/wh/ns/t"),
        ("s3://b/wh", "s3n://b/wh/ns/t"),
    ],
)
def test_allowed_locations_and_the_session_policy_read_any_spelling(
    allowed: str, location: str
) -> None:
    storage = decode_storage_config(json.dumps({**_AWS, "allowedLocations": [allowed]}))
    scope = task_scope(storage, {"storageLocation": location, "write.data.path": "s3://b/wh/ns/t"})
    assert scope == ("s3://b/wh/ns/t",)  # one spelling; the data path is the location itself
    policy = session_policy(storage, [location])  # type: ignore[arg-type]
    assert policy == session_policy(storage, ["s3://b/wh/ns/t"])  # type: ignore[arg-type]
    resources = {r for s in policy["Statement"] for r in s["Resource"]}
    assert resources == {"arn:aws:s3:::b/wh/ns/t/*", "arn:aws:s3:::b"}


def test_the_sas_path_and_the_gcs_boundary_read_any_spelling() -> None:
    dfs = azure_location_of("abfss://c@acct.dfs.core.windows.net/wh/ns/t/")
    blob = azure_location_of("wasb://c@acct.blob.core.windows.net/wh/ns/t")
    assert (dfs.container, dfs.account, dfs.path) == (blob.container, blob.account, blob.path)
    assert boundary_rules(["gcs://b/wh/ns/t"]) == boundary_rules(["gs://b/wh/ns/t/"])


def test_catalog_config_keeps_polaris_s_prefixes() -> None:
    for loc in ("s3://b/wh", "S3A://b/wh"):
        decode_storage_config(json.dumps({**_AWS, "allowedLocations": [loc]}))
    for loc in ("s3n://b/wh", "gs://b/wh", "s3:/b/wh"):
        with pytest.raises(ValueError, match="does not start with s3:// or s3a://"):
            decode_storage_config(json.dumps({**_AWS, "allowedLocations": [loc]}))
    file_doc = {"@type": "FileStorageConfigurationInfo"}
    for loc in ("file:/wh", "file:///wh", "/wh", "*"):
        decode_storage_config(json.dumps({**file_doc, "allowedLocations": [loc]}))
    with pytest.raises(ValueError, match="is not a local path"):
        decode_storage_config(json.dumps({**file_doc, "allowedLocations": ["s3://b/wh"]}))


def test_the_guard_knows_the_table_location_itself_in_any_spelling() -> None:
    guard = PathGuard(["abfss://c@acct.dfs.core.windows.net/wh/t"])
    guard.check("wasbs://c@acct.blob.core.windows.net/wh/t/data/a.parquet")
    refused = guard.split(
        [
            "wasbs://c@acct.blob.core.windows.net/wh/t",
            "abfs://d@acct.dfs.core.windows.net/wh/t/data/a.parquet",
        ]
    )[1]
    assert [r.reason for r in refused] == [
        "is a table location itself",
        "other host 'd@acct.dfs.core.windows.net'",
    ]
    local = PathGuard(["file:/wh/t"])
    assert [r.reason for r in local.split(["/wh/t", "file:///wh/t"])[1]] == [
        "is a table location itself"
    ] * 2


# -- end to end: local tables ---------------------------------------------------------

SPELL: dict[str, Callable[[str], str]] = {
    "file:///": lambda path: f"file://{path}",
    "file:/": lambda path: f"file:{path}",
    "bare": lambda path: path,
}
# (recorded storageLocation, metadata file's own location): each pair both ways.
LOCAL_PAIRS = [
    ("file:/", "file:///"),
    ("file:///", "file:/"),
    ("bare", "file:///"),
    ("file:///", "bare"),
    ("file:/", "bare"),
    ("bare", "file:/"),
]
LOCAL_IDS = [f"{a}-vs-{b}" for a, b in LOCAL_PAIRS]


def _path(uri: str) -> str:
    return split_uri(uri)[1]


def _declare(table: Table, location: str) -> None:
    """Rewrite the table's current metadata file to declare ``location``, all else kept."""
    doc = json.loads(table.io.new_input(table.metadata_location).open().read())
    doc["location"] = location
    with table.io.new_output(table.metadata_location).create(overwrite=True) as out:
        out.write(json.dumps(doc).encode())


def _drop(table: Table, recorded: str, **internal: str) -> NewTask:
    """Polaris's drop-with-purge task, its ``storageLocation`` spelt ``recorded``."""
    return built_tasks.drop_table_task(
        table, extra_internal_properties={"storageLocation": recorded, **internal}
    )


def _sweep(store: Metastore, task: NewTask) -> list[Any]:
    store.insert_tasks([task])
    with Runner(store, StorageConfig(), resolver=StorageResolver()) as runner:
        return sweep_tasks(runner)


def _parent(outcomes: list[TaskOutcome], task: NewTask) -> TaskOutcome:
    return next(o for o in outcomes if o.lease.task_id == task.id)


def _assert_refused(store: Metastore, task: NewTask, outcome: TaskOutcome, words: str) -> None:
    assert outcome.status in (Status.FAILED, Status.DEAD) and outcome.permanent, outcome
    assert outcome.error is not None and words in outcome.error, outcome.error
    row = store.get_task(task.realm_id, task.id)
    assert row is not None and row.last_error == bounded_error(outcome.error)


@pytest.mark.parametrize(("recorded", "declared"), LOCAL_PAIRS, ids=LOCAL_IDS)
def test_table_purged_when_catalog_and_metadata_spell_the_location_apart(
    built_local_warehouse: Warehouse, store: Metastore, recorded: str, declared: str
) -> None:
    """Issue 26: ``file:/wh/ns/t`` recorded, ``file:///wh/ns/t`` declared: one directory."""
    wh = built_local_warehouse
    table = wh.catalog.load_table(BUILT_TABLE)
    # The neighbour shares the table's name as a string prefix.
    oracle, kept = wh.built_files(BUILT_TABLE), wh.built_files(BUILT_NEIGHBOUR)
    path = _path(table.location())
    _declare(table, SPELL[declared](path))
    task = _drop(table, SPELL[recorded](path))

    outcomes = _sweep(store, task)

    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert not any(wh.exists(f) for f in oracle)
    assert all(wh.exists(f) for f in kept)
    assert store.list_tasks() == []


@pytest.mark.parametrize(
    ("recorded", "declared", "words"),
    [
        ("{loc}", "file://host{path}", "declares location 'file://host"),
        ("{loc}", "file:{path}_2", "declares location 'file:"),
        ("file:{path}", "{loc}/data", "declares location"),
        ("{ns}", "{loc}/%2e%2e", "declares location"),  # would be {ns} if decoded
        ("{ns}", "file:{ns_path}/%74", "declares location"),  # would be {loc} if decoded
        ("file://host{path}", "{loc}", "file URI with a host"),
        ("{loc}_2", "{loc}", "outside the table location"),
    ],
)
def test_look_alike_declared_locations_are_refused_and_recorded(
    local_warehouse: Warehouse, store: Metastore, recorded: str, declared: str, words: str
) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=1)
    wh.build("t_2", appends=1)
    loc, path = table.location(), _path(table.location())
    ns = loc.rsplit("/", 1)[0]
    names = {"loc": loc, "path": path, "ns": ns, "ns_path": _path(ns)}
    _declare(table, declared.format(**names))
    before = wh.files()
    task = _drop(table, recorded.format(**names))

    outcomes = _sweep(store, task)

    _assert_refused(store, task, _parent(outcomes, task), words)
    assert wh.files() == before


@pytest.mark.parametrize(
    ("allowed", "recorded"),
    [("bare", "file:/"), ("file:/", "file:///"), ("file:///", "bare"), ("file:/", "bare")],
)
def test_catalog_file_storage_scopes_a_location_spelt_apart_from_allowed_locations(
    local_warehouse: Warehouse, store: Metastore, allowed: str, recorded: str
) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=1)
    oracle = table_files(table)
    info = _file_storage(SPELL[allowed](_path(wh.uri)) + "/")
    task = _drop(table, SPELL[recorded](_path(table.location())), **info)

    outcomes = _sweep(store, task)

    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert not any(wh.exists(f) for f in oracle)


def test_catalog_file_storage_refuses_a_look_alike_allowed_location(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    wh = local_warehouse
    table = wh.build("t", appends=1)
    before = wh.files()
    task = _drop(table, table.location(), **_file_storage(f"file:{_path(wh.uri)}_2"))

    outcome = _parent(_sweep(store, task), task)

    _assert_refused_or_failed(store, task, outcome, "outside the catalog's allowedLocations")
    assert wh.files() == before


def _file_storage(allowed: str) -> dict[str, str]:
    doc = {"@type": "FileStorageConfigurationInfo", "allowedLocations": [allowed]}
    return {STORAGE_CONFIG_KEY: json.dumps(doc)}


def _assert_refused_or_failed(
    store: Metastore, task: NewTask, outcome: TaskOutcome, words: str
) -> None:
    assert not outcome.ok and outcome.error is not None and words in outcome.error, outcome
    row = store.get_task(task.realm_id, task.id)
    assert row is not None and row.last_error == bounded_error(outcome.error)


# -- end to end: the CLI ----------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.mark.parametrize(("recorded", "listed"), LOCAL_PAIRS, ids=LOCAL_IDS)
def test_sweep_once_deletes_a_batch_spelt_apart_from_its_root_and_refuses_look_alikes(
    tmp_path: Path, store: Metastore, recorded: str, listed: str
) -> None:
    root = tmp_path / "wh" / "ns" / "t"
    files = [root / "data" / f"{i}.parquet" for i in range(3)]
    sibling = tmp_path / "wh" / "ns" / "t_2" / "data" / "keep.parquet"
    for f in (*files, sibling):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"x")
    url = store.url.render_as_string(hide_password=False)
    old = store.now_ms() - OLD_MS
    internal = {"storageLocation": SPELL[recorded](str(root))}
    listed_files = [SPELL[listed](str(f)) for f in files]
    good = batch_task("POLARIS", listed_files, internal=internal, create_timestamp=old)
    hostile = [f"file://host{files[0]}", SPELL[listed](str(sibling))]
    bad = batch_task("POLARIS", hostile, internal=internal, create_timestamp=old)
    store.insert_tasks([good, bad])

    code, out = _cli("sweep", "--dry-run", "--json", "--metastore", url)
    assert code == 1, out  # the look-alikes' task would fail: the dry run says so
    plans = {d["id"]: d for d in json.loads(out)["tasks"]}
    assert plans[str(good.id)]["would_delete"] == listed_files
    assert plans[str(good.id)]["refused"] == []
    assert plans[str(bad.id)]["would_delete"] == []
    assert {r["path"]: r["reason"] for r in plans[str(bad.id)]["refused"]} == {
        hostile[0]: "file URI with a host",
        hostile[1]: f"outside the table location file://{root}",
    }

    code, out = _cli("sweep", "--metastore", url)

    assert not any(f.exists() for f in files) and sibling.exists(), out
    assert store.get_task("POLARIS", good.id) is None
    row = store.get_task("POLARIS", bad.id)
    assert row is not None and row.last_error is not None
    assert "guard refused 2 path(s)" in row.last_error
    assert "file URI with a host" in row.last_error


def test_sweep_once_purges_the_table_of_issue_26(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    """``storageLocation`` ``file:/wh/ns/t``, the metadata's ``file:///wh/ns/t``: purged,
    not dead-lettered at attempt 1."""
    wh = local_warehouse
    table = wh.build("t", appends=2)
    oracle = table_files(table)
    task = built_tasks.drop_table_task(
        table,
        create_timestamp=store.now_ms() - OLD_MS,
        extra_internal_properties={"storageLocation": f"file:{_path(table.location())}"},
    )
    store.insert_tasks([task])

    code, out = _cli("sweep", "--metastore", store.url.render_as_string(False))

    assert code == 0, out
    assert not any(wh.exists(f) for f in oracle)
    assert store.list_tasks() == []


# -- end to end: the Dagster job ---------------------------------------------------------


def test_dagster_job_purges_a_table_whose_storage_location_is_hadoop_s_spelling(
    built_local_warehouse: Warehouse, store: Metastore, instance: DagsterInstance
) -> None:
    wh = built_local_warehouse
    table = wh.catalog.load_table(BUILT_TABLE)
    oracle, kept = wh.built_files(BUILT_TABLE), wh.built_files(BUILT_NEIGHBOUR)
    task = built_tasks.drop_table_task(
        table,
        create_timestamp=store.now_ms() - OLD_MS,
        extra_internal_properties={"storageLocation": f"file:{_path(table.location())}"},
    )
    store.insert_tasks([task])
    resource = metastore_resource(store)
    storage = PolarisStorageResource(allowed_prefixes=[f"file:{_path(wh.uri)}/"])
    with build_sensor_context(
        instance=instance,
        resources=sweeper_resources(resource, SweeperSettings(interval_seconds=0), storage=storage),
    ) as context:
        result = deployed_sensor(SENSOR_NAME)(context)
    assert isinstance(result, SensorResult)
    [request] = result.run_requests or []
    run = polaris_task_job.execute_in_process(
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources={"metastore": resource, "storage": storage},
        raise_on_error=False,
    )

    assert run.success
    assert not any(wh.exists(f) for f in oracle)
    assert all(wh.exists(f) for f in kept)
    assert store.list_tasks() == []


# -- end to end: S3 (moto with IAM), Azure (Azurite), GCS (fake-gcs-server) -------------


def _s3a(uri: str) -> str:
    return "s3a://" + uri.removeprefix("s3://")


@pytest.mark.parametrize("spelt", ["storageLocation", "metadata", "allowedLocations"])
def test_s3_table_purged_under_an_assumed_role_whichever_record_says_s3a(
    moto_iam: MotoIam, sweeper_identity: None, store: Metastore, tmp_path: Path, spelt: str
) -> None:
    """The session policy is cut from the scope in one spelling, so IAM lets it delete."""
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    prefix = table.location().split(f"s3://{bucket}/", 1)[1]
    neighbour = f"{prefix}_2/data/keep.parquet"
    moto_iam.client().put_object(Bucket=bucket, Key=neighbour, Body=b"keep")
    recorded = _s3a(table.location()) if spelt == "storageLocation" else table.location()
    if spelt == "metadata":
        _declare(table, _s3a(table.location()))
    info = json.loads(aws_storage_info(moto_iam, bucket, "purger"))
    if spelt == "allowedLocations":
        info["allowedLocations"] = [f"s3a://{bucket}/wh/"]
    task = _drop(table, recorded, **{STORAGE_CONFIG_KEY: json.dumps(info)})

    outcomes = _sweep(store, task)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert {k for k in moto_iam.keys(bucket) if k.startswith(prefix)} == {neighbour}


@pytest.mark.parametrize(
    ("recorded", "allowed", "words"),
    [
        ("s3://{other}/wh/ns/t", "s3://{other}/wh", "other bucket"),
        ("gs://{bucket}/wh/ns/t", "s3://{bucket}/wh", "outside the catalog's allowedLocations"),
        ("s3a://{bucket}/wh/ns/t", "s3a://{bucket}/wh_2", "outside the catalog's allowedLocations"),
    ],
)
def test_s3_look_alikes_are_refused_and_recorded(
    moto_iam: MotoIam,
    sweeper_identity: None,
    store: Metastore,
    tmp_path: Path,
    recorded: str,
    allowed: str,
    words: str,
) -> None:
    bucket, other = moto_iam.new_bucket(), moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    keys = moto_iam.keys(bucket)
    info = json.loads(aws_storage_info(moto_iam, bucket, "purger"))
    info["allowedLocations"] = [allowed.format(bucket=bucket, other=other)]
    task = _drop(
        table, recorded.format(bucket=bucket, other=other), **{STORAGE_CONFIG_KEY: json.dumps(info)}
    )

    outcome = _parent(_sweep(store, task), task)

    _assert_refused_or_failed(store, task, outcome, words)
    assert moto_iam.keys(bucket) == keys


@pytest.fixture
def azure_key(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Azurite:  # noqa: F811
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    return azurite


def _wasbs(abfs: str) -> str:
    container_at, rest = abfs.removeprefix("abfs://").split(".dfs.", 1)
    return f"wasbs://{container_at}.blob.{rest}"


@pytest.mark.parametrize("spelt", ["storageLocation", "allowedLocations", "metadata"])
def test_azure_table_purged_whichever_record_says_wasbs(
    azure_key: Azurite, store: Metastore, tmp_path: Path, spelt: str
) -> None:
    container = azure_key.new_container()
    table = azurite_table(azure_key, tmp_path, container, "t")
    prefix = azure_location_of(table.location()).path
    neighbour = f"{prefix}_2/data/keep.parquet"
    azure_key.put(container, neighbour, b"keep")
    recorded = _wasbs(table.location()) if spelt == "storageLocation" else table.location()
    if spelt == "metadata":
        _declare(table, _wasbs(table.location()))
    allowed = f"abfs://{container}@{ACCOUNT}.dfs.core.windows.net/wh"
    info = azure_storage_info(container, _wasbs(allowed) if spelt == "allowedLocations" else None)
    task = _drop(table, recorded, **{STORAGE_CONFIG_KEY: info})
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert {n for n in azure_key.names(container) if n.startswith(prefix)} == {neighbour}


def test_azure_look_alike_container_is_refused_and_recorded(
    azure_key: Azurite, store: Metastore, tmp_path: Path
) -> None:
    mine, other = azure_key.new_container(), azure_key.new_container()
    table = azurite_table(azure_key, tmp_path, mine, "t")
    names = azure_key.names(mine)
    look_alike = _wasbs(table.location()).replace(f"//{mine}@", f"//{other}@", 1)
    task = _drop(table, look_alike, **{STORAGE_CONFIG_KEY: azure_storage_info(mine)})
    store.insert_tasks([task])

    [outcome, *_] = [o for o in catalog_sweep(store) if o.lease.task_id == task.id]

    _assert_refused_or_failed(store, task, outcome, "outside the catalog's allowedLocations")
    assert azure_key.names(mine) == names


@pytest.fixture
def emulator(fake_gcs: FakeGcs, monkeypatch: pytest.MonkeyPatch) -> FakeGcs:  # noqa: F811
    monkeypatch.setenv(EMULATOR_ENV, fake_gcs.url)
    return fake_gcs


def test_gcs_table_purged_when_the_task_says_gcs(
    emulator: FakeGcs, store: Metastore, tmp_path: Path
) -> None:
    bucket = emulator.new_bucket()
    table = fake_gcs_table(emulator, tmp_path, bucket, "t")
    prefix = table.location().split(f"gs://{bucket}/", 1)[1]
    emulator.put(bucket, f"{prefix}_2/data/keep.parquet", b"keep")
    recorded = "gcs://" + table.location().removeprefix("gs://")
    task = _drop(table, recorded, **{STORAGE_CONFIG_KEY: gcs_storage_info(bucket)})
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert {n for n in emulator.names(bucket) if n.startswith(prefix)} == {
        f"{prefix}_2/data/keep.parquet"
    }


def test_gcs_look_alike_bucket_is_refused_and_recorded(
    emulator: FakeGcs, store: Metastore, tmp_path: Path
) -> None:
    bucket, other = emulator.new_bucket(), emulator.new_bucket()
    table = fake_gcs_table(emulator, tmp_path, bucket, "t")
    names = emulator.names(bucket)
    recorded = table.location().replace(f"gs://{bucket}/", f"gs://{other}/")
    task = _drop(table, recorded, **{STORAGE_CONFIG_KEY: gcs_storage_info(bucket)})
    store.insert_tasks([task])

    [outcome] = [o for o in catalog_sweep(store) if o.lease.task_id == task.id]

    _assert_refused_or_failed(store, task, outcome, "outside the catalog's allowedLocations")
    assert emulator.names(bucket) == names
