"""The task job's contract (tags, run keys, step names, its version) and the translator.

In process, against the session's metastores and a real Dagster instance: a
run of each kind is executed by the job and its stored tags, step metadata and
the catalog's events are read back from the instance.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    ReexecutionOptions,
    build_sensor_context,
    execute_job,
    reconstructable,
)
from dagster._core.storage.tags import RUN_KEY_TAG as DAGSTERS_RUN_KEY_TAG
from dagster.components.testing import create_defs_folder_sandbox

from builders.tasks import TABLE_ID, batch_task, manifest_task_data
from polaris_pipeline.dagster import PolarisSweeper, build_defs
from polaris_pipeline.dagster.contract import (
    CONTRACT_VERSION,
    FINISH_STEP,
    JOB_NAME,
    ORPHANED_CHILDREN,
    ROOT_STEP,
    RUN_KEY_TAG,
    TAG_ATTEMPT,
    TAG_CONTRACT,
    TAG_EXECUTOR,
    TAG_TABLE,
    TAG_TASK_TYPE,
    ContractMismatch,
    check_run_contract,
    child_step,
    gate_step,
    run_config_for,
    run_key,
)
from polaris_pipeline.dagster.reporting import REPORT_SENSOR_NAME, report_run
from polaris_pipeline.dagster.resources import PolarisStorageResource, clear_storage_cache
from polaris_pipeline.dagster.sweep_plan import run_request_for
from polaris_pipeline.dagster.tables import table_of
from polaris_pipeline.dagster.task_job import build_polaris_task_job, polaris_task_job
from polaris_pipeline.dagster.translator import PolarisTranslator, translator_from_path
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.settings import CONFIG_ENV_VAR, GRACE_ENV, URL_ENV
from polaris_pipeline.tasks.model import NewTask, Prop, TaskRow
from polaris_pipeline.tasks.orphans import CandidateRun
from polaris_pipeline.tasks.payloads import batch_cleanup_task_name
from tests.support import reexecution_job
from tests.support.daemon_fixtures import write_storage_config
from tests.support.dagster import metastore_resource
from tests.support.translators import TEAM, TEAM_TAG, LakeTranslator

REALM = "POLARIS"
OLD_MS = 10 * 60_000
# The step names of contract version 2 (and of every untagged run, version 1) for the
# engine's stage plan: a run made by either re-executes its failed steps by these keys.
VERSION_2_STEPS = {
    "run_polaris_task",
    "run_manifest_children",
    "release_metadata_children",
    "run_metadata_children",
    "release_current_metadata_children",
    "run_current_metadata_children",
}


def _row(task: NewTask, version: int = 1) -> TaskRow:
    return TaskRow(
        realm_id=task.realm_id,
        id=task.id,
        name=task.name,
        entity_version=version,
        grant_records_version=1,
        create_timestamp=0,
        last_update_timestamp=0,
        properties=dict(task.properties),
    )


def _files(root: Path, n: int) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = root / f"f{i}.parquet"
        path.write_bytes(b"x" * (i + 1))
        paths.append(f"file://{path}")
    return paths


def _execute(
    job: Any,
    store: Metastore,
    instance: DagsterInstance,
    warehouse: Path,
    run_config: Mapping[str, Any],
    tags: Mapping[str, str] | None = None,
) -> Any:
    return job.execute_in_process(
        run_config=run_config,
        tags=dict(tags or {}),
        instance=instance,
        resources={
            "metastore": metastore_resource(store),
            "storage": PolarisStorageResource(allowed_prefixes=[f"file://{warehouse}"]),
        },
        raise_on_error=False,
    )


# -- the contract ----------------------------------------------------------------------


def test_run_keys_come_from_one_function() -> None:
    one = batch_task(REALM)
    assert run_key(CandidateRun((_row(one, 7),))) == f"{REALM}:{one.id}:7"
    assert run_key(CandidateRun((_row(one, 7),)), again_at_ms=99) == f"{REALM}:{one.id}:7:again:99"
    a, b = batch_task(REALM), batch_task(REALM)
    group = CandidateRun((_row(a, 1), _row(b, 2)), parent_name="entityCleanup_4711")
    key = run_key(group)
    assert key.startswith(f"{REALM}:orphans:entityCleanup_4711:") and len(key.split(":")[-1]) == 16
    # Any member's version is part of the key; the order of the members is not.
    assert run_key(CandidateRun((_row(b, 2), _row(a, 1)), parent_name="entityCleanup_4711")) == key
    assert run_key(CandidateRun((_row(a, 1), _row(b, 3)), parent_name="entityCleanup_4711")) != key
    assert run_request_for(group).run_key == key


def test_the_contract_version_of_a_run_is_checked_in_one_line() -> None:
    for readable in ({}, {TAG_CONTRACT: ""}, {TAG_CONTRACT: "1"}, {TAG_CONTRACT: "2"}):
        check_run_contract(readable)
    with pytest.raises(ContractMismatch) as caught:
        check_run_contract({TAG_CONTRACT: "3"})
    description = caught.value.description or ""
    assert "\n" not in description
    assert description.startswith("run made by task job contract version 3 (polaris/contract)")
    assert f"runs version {CONTRACT_VERSION}" in description


def test_the_step_names_are_the_contracts_and_those_of_version_2() -> None:
    nodes = {node.name for node in polaris_task_job.graph.nodes}
    # Version 2's steps, and one added after them (a version-2 run re-executes with
    # it skipped: its root never handed it a table).
    assert nodes == VERSION_2_STEPS | {FINISH_STEP}
    stages = ("manifest", "metadata", "current_metadata")
    assert nodes == {
        ROOT_STEP,
        *(child_step(s) for s in stages),
        *(gate_step(s) for s in stages[1:]),
        FINISH_STEP,
    }
    assert polaris_task_job.name == JOB_NAME
    assert polaris_task_job.tags[TAG_CONTRACT] == str(CONTRACT_VERSION)


def test_every_run_carries_its_version_an_untagged_one_runs_a_later_one_fails_clearly(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
) -> None:
    files = _files(tmp_path / "ns" / "t" / "metadata", 2)
    task = batch_task(
        REALM,
        files,
        create_timestamp=metastore.now_ms() - OLD_MS,
        internal={"storageLocation": f"file://{tmp_path}/ns/t"},
    )
    later = batch_task(REALM, create_timestamp=metastore.now_ms() - OLD_MS)
    metastore.insert_tasks([task, later])

    # A run made before the version was tagged (version 1): it runs as today's.
    old = _execute(
        polaris_task_job,
        metastore,
        instance,
        tmp_path,
        run_config_for(REALM, task.id),
        tags={TAG_CONTRACT: ""},
    )
    assert old.success
    assert metastore.get_task(REALM, task.id) is None
    assert not any(Path(f.removeprefix("file://")).exists() for f in files)

    # A run of a version this code does not read: one line, and the task untouched.
    newer = _execute(
        polaris_task_job,
        metastore,
        instance,
        tmp_path,
        run_config_for(REALM, later.id),
        tags={TAG_CONTRACT: "3"},
    )
    assert not newer.success
    [failure] = [
        e
        for e in instance.all_logs(newer.run_id)
        if e.dagster_event and e.dagster_event.event_type is DagsterEventType.STEP_FAILURE
    ]
    error = failure.dagster_event.step_failure_data.user_failure_data  # type: ignore[union-attr]
    assert error is not None and error.description is not None
    assert error.description.startswith("run made by task job contract version 3")
    row = metastore.get_task(REALM, later.id)
    assert row is not None and row.executor_id is None and row.attempt_count == 0

    # Today's runs carry today's version, from the job's own tags.
    today = _execute(
        polaris_task_job, metastore, instance, tmp_path, run_config_for(REALM, later.id)
    )
    run = instance.get_run_by_id(today.run_id)
    assert today.success and run is not None
    assert run.tags[TAG_CONTRACT] == str(CONTRACT_VERSION)


def test_a_failed_run_of_the_untagged_version_re_executes_from_failure_after_the_upgrade(
    metastore: Metastore,
    instance: DagsterInstance,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run made before the contract was tagged (no tag), failed; re-executed from its
    failure by the code location of today, it runs the task."""
    config = tmp_path / "storage.yaml"
    write_storage_config(config, [f"file://{tmp_path}/elsewhere"])  # the guard refuses
    monkeypatch.setenv(URL_ENV, metastore.url.render_as_string(hide_password=False))
    monkeypatch.setenv(CONFIG_ENV_VAR, str(config))
    monkeypatch.setenv(GRACE_ENV, "0")
    files = _files(tmp_path / "wh" / "ns" / "t" / "metadata", 2)
    task = batch_task(
        REALM,
        files,
        create_timestamp=metastore.now_ms() - OLD_MS,
        internal={"storageLocation": f"file://{tmp_path}/wh/ns/t"},
    )
    metastore.insert_tasks([task])
    job = reconstructable(reexecution_job.task_job)

    before = reconstructable(reexecution_job.untagged_task_job)
    with execute_job(before, instance, run_config=run_config_for(REALM, task.id)) as parent:
        assert not parent.success
    made = instance.get_run_by_id(parent.run_id)
    assert made is not None and TAG_CONTRACT not in made.tags
    row = metastore.get_task(REALM, task.id)
    assert row is not None and row.status == "dead"  # refused: a permanent failure

    write_storage_config(config, [f"file://{tmp_path}/wh"])  # the operator fixes it
    clear_storage_cache()
    options = ReexecutionOptions.from_failure(parent.run_id, instance)
    with execute_job(job, instance, reexecution_options=options) as again:
        assert again.success
    assert metastore.get_task(REALM, task.id) is None
    assert not any(Path(f.removeprefix("file://")).exists() for f in files)
    run = instance.get_run_by_id(again.run_id)
    assert run is not None and run.parent_run_id == parent.run_id
    assert run.tags[TAG_CONTRACT] == str(CONTRACT_VERSION)  # today's job made it


# -- issue 26: the tags of a grouped run and of a partly decodable task ----------------------


def test_a_run_of_orphaned_children_carries_its_executor_and_highest_attempt(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
) -> None:
    parent = "entityCleanup_4711"
    old = metastore.now_ms() - OLD_MS
    children = []
    for n, attempts in ((1, None), (2, "2")):
        files = _files(tmp_path / "ns" / "t" / f"c{n}", 2)
        extra = {Prop.ATTEMPT_COUNT: attempts} if attempts else None
        children.append(
            batch_task(
                REALM,
                files,
                name=batch_cleanup_task_name(parent, files),
                extra=extra,
                internal={"storageLocation": f"file://{tmp_path}/ns/t"},
                create_timestamp=old,
            )
        )
    metastore.insert_tasks(children)
    rows = [metastore.get_task(REALM, c.id) for c in children]
    group = CandidateRun(tuple(r for r in rows if r is not None), parent_name=parent)
    request = run_request_for(group)
    assert request.tags[TAG_TASK_TYPE] == ORPHANED_CHILDREN
    # The table the children's payloads name, as a single task's run carries it.
    assert request.tags["polaris/table"] == "ns.t"
    assert request.tags["polaris/table_location"] == f"file://{tmp_path}/ns/t"

    result = _execute(
        polaris_task_job, metastore, instance, tmp_path, request.run_config, dict(request.tags)
    )
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags[TAG_EXECUTOR] == metastore_resource(metastore).run_executor_id(run.run_id)
    # Two attempts before: this run's lease is the third; the other child's its first.
    assert run.tags[TAG_ATTEMPT] == "3"
    per_child: dict[str, Any] = {}
    for entry in instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_OUTPUT):
        meta = entry.dagster_event.step_output_data.metadata  # type: ignore[union-attr]
        if "tasks" in meta:
            listed: Any = meta["tasks"].value
            for one in listed:
                per_child[one["task id"]] = one["lease attempt"]
    assert per_child == {str(children[0].id): 1, str(children[1].id): 3}


def test_a_manifest_task_whose_manifest_does_not_decode_is_tagged_with_its_table(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
) -> None:
    task = NewTask(
        realm_id=REALM,
        id=new_entity_id(),
        name="entityCleanup_9_manifest",
        properties={Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data("not base64 at all!")},
        internal_properties={"storageLocation": f"file://{tmp_path}/ns/t"},
        create_timestamp=metastore.now_ms() - OLD_MS,
    )
    metastore.insert_tasks([task])
    ref = table_of(_row(task))
    assert ref is not None and ref.label == "ns.t" and ref.namespace == tuple(TABLE_ID["namespace"])

    result = _execute(
        polaris_task_job, metastore, instance, tmp_path, run_config_for(REALM, task.id)
    )
    assert not result.success  # the payload is refused, permanently
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE
    # Every part that decodes: the table and the type.
    assert run.tags[TAG_TABLE] == "ns.t"
    assert run.tags[TAG_TASK_TYPE] == "manifest_file_cleanup"


# -- the translator ----------------------------------------------------------------------


def test_a_translator_subclass_changes_the_asset_key_and_tags_through_build_defs(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
) -> None:
    files = _files(tmp_path / "ns" / "t" / "metadata", 3)
    task = batch_task(
        REALM,
        files,
        create_timestamp=metastore.now_ms() - OLD_MS,
        internal={"storageLocation": f"file://{tmp_path}/ns/t"},
    )
    metastore.insert_tasks([task])
    resource = metastore_resource(metastore)
    defs = build_defs(
        metastore=resource,
        storage=PolarisStorageResource(allowed_prefixes=[f"file://{tmp_path}"]),
        translator=LakeTranslator(),
    )
    job = defs.get_job_def(JOB_NAME)
    result = job.execute_in_process(
        run_config=run_config_for(REALM, task.id), instance=instance, raise_on_error=False
    )
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags[TEAM_TAG] == TEAM and run.tags[TAG_TABLE] == "ns.t"

    # The code location's run report records the table under the subclass's key.
    sensor = defs.get_repository_def().get_sensor_def(REPORT_SENSOR_NAME)
    with build_sensor_context(instance=instance) as context:
        sensor(context)
    key = AssetKey(["lake", "purged", REALM, "catalog_unknown", "ns", "t"])
    event = instance.get_latest_materialization_event(key)
    assert event is not None and event.asset_materialization is not None
    assert event.asset_materialization.metadata["files deleted"].value == 3
    assert instance.get_latest_materialization_event(AssetKey(["polaris", REALM])) is None
    # The default translator would have keyed it under polaris/...
    default = PolarisTranslator().table_asset_key(table_of(_row(task)))  # type: ignore[arg-type]
    assert default.path[:2] == ["polaris", REALM]


def test_a_translator_by_import_path_for_the_component() -> None:
    made = translator_from_path("tests.support.translators.LakeTranslator")
    assert isinstance(made, LakeTranslator)
    colon = translator_from_path("tests.support.translators:LakeTranslator")
    assert isinstance(colon, LakeTranslator)
    for bad in ("LakeTranslator", "tests.support.translators.Nope", "json.JSONDecoder"):
        with pytest.raises(ValueError):
            translator_from_path(bad)


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
def test_the_component_runs_its_tasks_through_the_translator_it_names(
    metastore: Metastore,
    instance: DagsterInstance,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(URL_ENV, metastore.url.render_as_string(hide_password=False))
    files = _files(tmp_path / "ns" / "t" / "metadata", 2)
    task = batch_task(
        REALM,
        files,
        create_timestamp=metastore.now_ms() - OLD_MS,
        internal={"storageLocation": f"file://{tmp_path}/ns/t"},
    )
    metastore.insert_tasks([task])
    defs_yaml = {
        "type": "polaris_pipeline.dagster.PolarisSweeper",
        "attributes": {
            "metastore": {"url": "{{ env.POLARIS_METASTORE_URL }}"},
            "storage": {"allowed_prefixes": [f"file://{tmp_path}"]},
            "translator": "tests.support.translators.LakeTranslator",
        },
    }
    with create_defs_folder_sandbox() as sandbox:
        path = sandbox.scaffold_component(
            component_cls=PolarisSweeper, defs_yaml_contents=defs_yaml
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert isinstance(component, PolarisSweeper)
            result = defs.resolve_job_def(JOB_NAME).execute_in_process(
                run_config=run_config_for(REALM, task.id), instance=instance, raise_on_error=False
            )
    assert result.success
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags[TEAM_TAG] == TEAM
    assert metastore.get_task(REALM, task.id) is None


def test_report_run_uses_the_translator_it_is_given(
    metastore: Metastore, instance: DagsterInstance, tmp_path: Path
) -> None:
    files = _files(tmp_path / "ns" / "t" / "metadata", 1)
    task = batch_task(
        REALM,
        files,
        create_timestamp=metastore.now_ms() - OLD_MS,
        internal={"storageLocation": f"file://{tmp_path}/ns/t"},
    )
    metastore.insert_tasks([task])
    job = build_polaris_task_job(translator=LakeTranslator())
    result = _execute(job, metastore, instance, tmp_path, run_config_for(REALM, task.id))
    run = instance.get_run_by_id(result.run_id)
    assert result.success and run is not None
    total = report_run(instance, run, LakeTranslator())
    assert total.files_deleted == 1
    key = AssetKey(["lake", "purged", REALM, "catalog_unknown", "ns", "t"])
    assert instance.get_latest_materialization_event(key) is not None
    assert json.loads(json.dumps(dict(run.tags)))[TEAM_TAG] == TEAM


def test_the_run_key_tag_is_the_one_dagster_writes() -> None:
    # Dagster exports no public name for it: the sweeper finds its runs by this string.
    assert RUN_KEY_TAG == DAGSTERS_RUN_KEY_TAG
