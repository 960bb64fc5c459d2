"""``tasks restore``: what it refuses (changing nothing), what it prints without a REST
endpoint, and how it ends a restored table's purge (compare-and-set, holder named)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from dagster import EnvVar, build_resources
from dagster.components.core.component_tree import ComponentTree
from pyiceberg.table import Table

from builders.tasks import drop_table_task
from polaris_pipeline.dagster import PolarisSweeper, build_defs, build_defs_from_env
from polaris_pipeline.dagster.definitions import RESTORE_SECRET_ENV, deployment_from_env
from polaris_pipeline.dagster.resources import PolarisRestoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.dagster.restore_job import (
    RESTORE_JOB,
    RESTORE_OP,
    polaris_restore_table_job,
)
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.register import CATALOG_ENV, URI_ENV, RegisterError, RestTarget
from polaris_pipeline.restore.restore import (
    RestorePlan,
    RestoreRefused,
    plan_restore,
    restore,
    write_restore_record,
)
from polaris_pipeline.settings import URL_ENV
from polaris_pipeline.tasks.model import NewTask, TaskRow
from polaris_pipeline.tasks.payloads import TableIdentifier
from tests.support.cli import run, url_of
from tests.support.dagster import metastore_resource
from tests.support.iceberg import Warehouse
from tests.support.tasks import batch_task, purge_child
from tests.support.unreferenced import live_entity

PRINT_ONLY = RestTarget(None, "lake")


def _dropped(store: Metastore, table: Table) -> tuple[NewTask, NewTask]:
    """``table``'s drop task and one child Polaris created for it, in ``store``."""
    parent = drop_table_task(table)
    child = purge_child(
        "POLARIS", parent.name, ("ns", table.name()[-1]), ["file:///x"], create_timestamp=1
    )
    store.insert_tasks([parent, child])
    return parent, child


def _row(store: Metastore, task: NewTask) -> TaskRow:
    row = store.get_task(task.realm_id, task.id)
    assert row is not None
    return row


def _unchanged(store: Metastore, *tasks: NewTask) -> None:
    for task in tasks:
        row = _row(store, task)
        assert row.entity_version == 1 and row.executor_id is None


def test_without_an_endpoint_it_prints_the_three_ways_and_changes_nothing(
    tmp_path: Path, local_warehouse: Warehouse, store: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = local_warehouse.build("orders", appends=1)
    parent, child = _dropped(store, table)
    monkeypatch.delenv("POLARIS_PIPELINE_RESTORE_REST_URI", raising=False)
    code, out = run(
        "tasks", "restore", str(parent.id), "--catalog", "lake", "--metastore", url_of(store)
    )
    assert code == 0, out
    metadata = table.metadata_location
    assert "POST https://<polaris>/api/catalog/v1/lake/namespaces/ns/register" in out
    assert json.dumps({"name": "orders", "metadata-location": metadata}) in out
    assert (
        f"CALL lake.system.register_table(table => 'ns.orders', metadata_file => '{metadata}')"
        in out
    )
    assert f"catalog.register_table(('ns', 'orders'), {metadata!r})" in out
    assert "nothing was changed" in out
    _unchanged(store, parent, child)


def test_a_task_that_is_not_a_drop_is_refused(local_warehouse: Warehouse, store: Metastore) -> None:
    batch = batch_task("POLARIS", ["file:///x"])
    store.insert_tasks([batch])
    with pytest.raises(RestoreRefused, match="not a table's or view's drop"):
        restore(store, local_warehouse.resolver, PRINT_ONLY, _row(store, batch), None)
    _unchanged(store, batch)


def test_a_table_that_lost_a_file_is_refused_with_the_count(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    table = local_warehouse.build("t", appends=1)
    parent, child = _dropped(store, table)
    data = next(f.file.file_path for f in table.scan().plan_files())
    fs, path = local_warehouse.resolver.filesystem(data)
    fs.rm(path)
    with pytest.raises(RestoreRefused, match=r"is not restorable: 1 of \d+ files missing"):
        restore(store, local_warehouse.resolver, PRINT_ONLY, _row(store, parent), None)
    _unchanged(store, parent, child)


def test_a_live_table_at_its_location_is_refused_and_named(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    table = local_warehouse.build("t", appends=1)
    parent, child = _dropped(store, table)
    live_entity(store, table.location(), name="squatter")
    with pytest.raises(RestoreRefused, match="squatter"):
        restore(store, local_warehouse.resolver, PRINT_ONLY, _row(store, parent), None)
    _unchanged(store, parent, child)


def test_the_table_itself_registered_again_is_no_live_owner(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    """Registered from its very metadata file (a first run whose ending failed, or any
    client): the rerun plans on; the same location with another file stays refused."""
    table = local_warehouse.build("t", appends=1)
    parent, _ = _dropped(store, table)
    back = {"metadata-location": table.metadata_location}
    live_entity(store, table.location(), name="t", internal_properties=back)

    plan = plan_restore(store, local_warehouse.resolver, _row(store, parent), None)

    assert plan.metadata_file == table.metadata_location
    other = {"metadata-location": table.metadata_location + ".other"}
    live_entity(store, table.location(), name="squatter", internal_properties=other)
    with pytest.raises(RestoreRefused, match="squatter"):
        plan_restore(store, local_warehouse.resolver, _row(store, parent), None)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_endpoint_is_one_line_without_the_secret(
    local_warehouse: Warehouse, store: Metastore
) -> None:
    table = local_warehouse.build("t", appends=1)
    parent, child = _dropped(store, table)
    target = RestTarget(
        f"http://127.0.0.1:{_closed_port()}/api/catalog", "lake", "client", "s3cr3t-value"
    )
    assert "s3cr3t-value" not in repr(target)
    with pytest.raises(RegisterError) as caught:
        restore(store, local_warehouse.resolver, target, _row(store, parent), None)
    message = str(caught.value)
    assert "cannot connect at http://127.0.0.1" in message and "\n" not in message
    assert "s3cr3t-value" not in message
    _unchanged(store, parent, child)


def test_ending_takes_the_parent_and_its_children_and_refuses_while_leased(
    metastore: Metastore,
) -> None:
    parent = drop_table_task_of("t")
    children = [
        purge_child("POLARIS", parent.name, ("ns", "t"), [f"file:///x{i}"], create_timestamp=1)
        for i in range(2)
    ]
    others = [
        purge_child("POLARIS", "entityCleanup_1", ("ns", "u"), ["file:///y"], create_timestamp=1),
        # Another family whose name starts with this one's, and this family's name in
        # another realm: neither is this table's.
        purge_child("POLARIS", f"{parent.name}9", ("ns", "v"), ["file:///z"], create_timestamp=1),
        purge_child("acme", parent.name, ("ns", "t"), ["file:///w"], create_timestamp=1),
    ]
    metastore.insert_tasks([parent, *children, *others])
    lease = metastore.lease_task("POLARIS", children[0].id, "run-7")
    assert lease is not None
    with pytest.raises(PolarisPipelineError, match="leased by run-7"):
        metastore.end_restored(_row(metastore, parent))
    assert all(metastore.get_task("POLARIS", t.id) is not None for t in (parent, *children))
    metastore.complete(lease)
    ended = metastore.end_restored(_row(metastore, parent))
    assert {t.id for t in ended} == {parent.id, children[1].id}
    assert metastore.get_task("POLARIS", parent.id) is None
    assert all(metastore.get_task(t.realm_id, t.id) is not None for t in others)


def drop_table_task_of(name: str) -> NewTask:
    """A drop task of table ``ns.<name>`` with no files behind it."""
    from builders.tasks import DropSpec, drop_task

    spec = DropSpec(
        ("ns",), name, f"file:///wh/ns/{name}/metadata/v1.json", f"file:///wh/ns/{name}"
    )
    return drop_task(spec)


def test_the_restore_record_says_who_when_what_and_as_what(
    tmp_path: Path, local_warehouse: Warehouse
) -> None:
    task = TaskRow("POLARIS", 42, "entityCleanup_7", 1, 1, 1, 1)
    plan = RestorePlan(task, TableIdentifier(("ns",), "t2"), "file:///wh/ns/t/m.json", False)
    prefix = (tmp_path / "records").as_uri()
    uri = write_restore_record(local_warehouse.resolver, prefix, plan, PRINT_ONLY, 3)
    assert uri.startswith(f"{prefix}/POLARIS/42/restore-")
    fs, path = local_warehouse.resolver.filesystem(uri)
    doc = json.loads(fs.cat_file(path))
    assert doc["task_id"] == "42" and doc["registered_as"] == "ns.t2"
    assert doc["metadata_file"] == "file:///wh/ns/t/m.json" and doc["tasks_ended"] == 3
    assert doc["by"] and doc["at"].endswith("Z") and doc["catalog"] == "lake"


def test_the_dagster_job_takes_the_same_config_and_fails_on_a_refusal(
    local_warehouse: Warehouse, store: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POLARIS_PIPELINE_RESTORE_REST_URI", raising=False)
    table = local_warehouse.build("orders", appends=1)
    parent, child = _dropped(store, table)
    batch = batch_task("POLARIS", ["file:///x"])
    store.insert_tasks([batch])
    resources = {
        "metastore": metastore_resource(store),
        "storage": PolarisStorageResource(),
        "restore": PolarisRestoreResource(),
    }

    def launch(task_id: int) -> Any:
        config = {"realm": "POLARIS", "task_id": task_id, "catalog": "lake"}
        return polaris_restore_table_job.execute_in_process(
            run_config={"ops": {RESTORE_OP: {"config": config}}},
            resources=resources,
            raise_on_error=False,
        )

    printed = launch(parent.id)
    assert printed.success
    (output,) = [e for e in printed.all_node_events if e.is_successful_output]
    metadata = output.step_output_data.metadata
    assert metadata["changed"].value is False
    assert "register_table(table => 'ns.orders'" in str(metadata["result"].value)
    _unchanged(store, parent, child)
    refused = launch(batch.id)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    assert "not a table's or view's drop" in str(failure.event_specific_data)


def _config_fields(job: Any) -> set[str]:
    """The field names of the restore op's ``config`` in ``job``'s run config schema."""
    ops = job.run_config_schema.config_type.fields["ops"].config_type
    return set(ops.fields[RESTORE_OP].config_type.fields["config"].config_type.fields)


def test_the_deployed_definitions_have_the_restore_job_and_it_restores_as_a_name(
    local_warehouse: Warehouse, store: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every deployment gets the job (build_defs; the code location and the Component are
    build_defs, tests/test_code_location.py), with the task id and the --as name."""
    monkeypatch.delenv("POLARIS_PIPELINE_RESTORE_REST_URI", raising=False)
    table = local_warehouse.build("orders", appends=1)
    parent, child = _dropped(store, table)
    defs = build_defs(metastore=metastore_resource(store))
    job = defs.resolve_job_def(RESTORE_JOB)
    assert {"realm", "task_id", "as_name"} <= _config_fields(job)
    env_job = build_defs_from_env({URL_ENV: url_of(store)}).resolve_job_def(RESTORE_JOB)
    assert _config_fields(env_job) == _config_fields(job)
    config = {"realm": "POLARIS", "task_id": parent.id, "as_name": "ns.back", "catalog": "lake"}
    result = job.execute_in_process(run_config={"ops": {RESTORE_OP: {"config": config}}})
    (output,) = [e for e in result.all_node_events if e.is_successful_output]
    printed = str(output.step_output_data.metadata["result"].value)
    assert "register_table(table => 'ns.back'" in printed, printed
    _unchanged(store, parent, child)


def _launched(defs: Any, task_id: int, **config: Any) -> Any:
    """One run of the deployed restore job for ``task_id`` (errors kept in the result)."""
    job = defs.resolve_job_def(RESTORE_JOB)
    run_config = {
        "ops": {RESTORE_OP: {"config": {"realm": "POLARIS", "task_id": task_id, **config}}}
    }
    return job.execute_in_process(run_config=run_config, raise_on_error=False)


def _printed(result: Any) -> str:
    (output,) = [e for e in result.all_node_events if e.is_successful_output]
    return str(output.step_output_data.metadata["result"].value)


def _failure(result: Any) -> str:
    return str(next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE"))


def test_the_job_registers_with_its_deployment_s_restore_resource_not_the_process_s_variables(
    local_warehouse: Warehouse, store: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build_defs(restore=), the component's restore: block and the environment the code
    location is built from each give the op its target; the run's config beats it, as a
    flag beats the section; the op's process environment is not read."""
    monkeypatch.delenv(URI_ENV, raising=False)
    monkeypatch.setenv(CATALOG_ENV, "from_the_process")
    table = local_warehouse.build("orders", appends=1)
    parent, child = _dropped(store, table)
    metastore = metastore_resource(store)

    given = build_defs(metastore=metastore, restore=PolarisRestoreResource(catalog="lake"))
    assert "CALL lake.system.register_table(" in _printed(_launched(given, parent.id))
    flagged = _launched(given, parent.id, catalog="sea")
    assert "CALL sea.system.register_table(" in _printed(flagged)
    yaml_text = f"metastore: {{url: {metastore.url!r}}}\nrestore: {{catalog: yard}}\n"
    component = PolarisSweeper.resolve_from_yaml(yaml_text)
    built = component.build_defs(ComponentTree.for_test().load_context)
    assert "CALL yard.system.register_table(" in _printed(_launched(built, parent.id))
    monkeypatch.setenv(URL_ENV, url_of(store))
    from_env = build_defs_from_env({URL_ENV: url_of(store), CATALOG_ENV: "pond"})
    assert "CALL pond.system.register_table(" in _printed(_launched(from_env, parent.id))

    # No catalog in the deployment: refused with the command's line, whatever the
    # op's process has.
    refused = _launched(build_defs(metastore=metastore), parent.id)
    assert not refused.success
    assert f"name the catalog: --catalog or ${CATALOG_ENV}" in _failure(refused)
    _unchanged(store, parent, child)


def test_the_restore_resource_s_target_takes_the_run_s_config_over_its_own() -> None:
    resource = PolarisRestoreResource(
        rest_uri="https://polaris/api/catalog", catalog=" lake ", client_secret="s3cret", scope=" "
    )
    target = resource.target(None, None)
    assert (target.uri, target.catalog, target.scope) == (
        "https://polaris/api/catalog",
        "lake",
        "PRINCIPAL_ROLE:ALL",
    )
    assert target.client_secret == "s3cret" and "s3cret" not in repr(target)
    assert "s3cret" not in repr(resource)
    flagged = resource.target("https://other/api/catalog", "sea")
    assert (flagged.uri, flagged.catalog) == ("https://other/api/catalog", "sea")
    with pytest.raises(PolarisPipelineError, match=f"--catalog or \\${CATALOG_ENV}$"):
        PolarisRestoreResource().target(None, None)


def test_the_restore_secret_travels_as_its_variable_and_is_never_shown(
    local_warehouse: Warehouse, store: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment door and the component's template hand the resource the variable
    (the UI shows its name); the op's process resolves it; no event of a failed run,
    its config or its one line holds the value."""
    secret = "s3cr3t-value"
    monkeypatch.delenv(RESTORE_SECRET_ENV, raising=False)
    monkeypatch.setenv("RESTORE_SECRET", secret)
    env = {URL_ENV: url_of(store), RESTORE_SECRET_ENV: secret}
    from_env = deployment_from_env(env).resources["restore"]
    assert from_env.client_secret == EnvVar(RESTORE_SECRET_ENV)
    yaml_text = (
        f"metastore: {{url: {url_of(store)!r}}}\n"
        'restore: {catalog: lake, client_id: pp, client_secret: "{{ env.RESTORE_SECRET }}"}\n'
    )
    component = PolarisSweeper.resolve_from_yaml(yaml_text)
    assert component.restore is not None
    assert component.restore.client_secret == EnvVar("RESTORE_SECRET")
    assert secret not in repr(component) and secret not in repr(from_env)
    with build_resources({"restore": component.restore}) as resolved:
        assert resolved.restore.target(None, None).client_secret == secret

    table = local_warehouse.build("t", appends=1)
    parent, child = _dropped(store, table)
    defs = component.build_defs(ComponentTree.for_test().load_context)
    endpoint = f"http://127.0.0.1:{_closed_port()}/api/catalog"
    failed = _launched(defs, parent.id, rest_uri=endpoint)
    assert not failed.success
    assert "cannot connect at http://127.0.0.1" in _failure(failed)
    run = failed.dagster_run
    shown = [str(e) for e in failed.all_events] + [repr(run.run_config)]
    assert not [text for text in shown if secret in text]
    _unchanged(store, parent, child)
