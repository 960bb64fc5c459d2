"""A dropped table restored by other means: its purge ends as ``restored``, nothing deleted.

A live table of the task's realm whose ``metadata-location`` is exactly the dropped
table's last metadata file (re-registered by Spark or any client) is the dropped table
itself: the shared-location guard ends the parent and its children (compare-and-set)
as ``restored`` (never done, never dead), naming the live entity on every surface,
and writes a restore record. A live table at the same location with another metadata
file, or one of the same file in another realm, stays refused as any overlap.

The live table is a row as Polaris writes it (``live_entity``); registering through
Polaris itself is tested by the restore command's REST test, not here.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, HookContext, success_hook
from pyiceberg.table import Table

from builders.tasks import DropSpec, drop_table_task, drop_task
from polaris_pipeline.cli import main
from polaris_pipeline.dagster.contract import (
    OUTCOME_RESTORED,
    ROOT_STEP,
    TAG_OUTCOME,
    run_config_for,
)
from polaris_pipeline.dagster.resources import PolarisStorageResource
from polaris_pipeline.dagster.task_job import polaris_task_job
from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import execute_tree
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.fields import RESTORED_AS
from polaris_pipeline.report.outcome_json import outcome_json
from polaris_pipeline.report.outcome_line import cli_line, log_line
from polaris_pipeline.report.outcome_metadata import step_output
from polaris_pipeline.tasks.model import NewTask, Prop
from polaris_pipeline.tasks.ref import Lease
from tests.support.cli import url_of
from tests.support.dagster import metastore_resource, run_task_job
from tests.support.iceberg import Warehouse, table_files, write_view_metadata
from tests.support.tasks import purge_child
from tests.support.unreferenced import live_entity


def _dropped(store: Metastore, wh: Warehouse) -> tuple[Table, NewTask, NewTask, set[str]]:
    """A table with files, its drop task and one child Polaris created for it."""
    table = wh.build("t", appends=2)
    parent = drop_table_task(table)
    child = purge_child(
        "POLARIS", parent.name, ("ns", "t"), [f"{table.location()}/x"], create_timestamp=1
    )
    store.insert_tasks([parent, child])
    return table, parent, child, table_files(table)


def _register(store: Metastore, table: Table, metadata_file: str, realm: str = "POLARIS") -> int:
    """A live table at ``table``'s location over ``metadata_file``, as Polaris writes it."""
    return live_entity(
        store,
        table.location().rstrip("/"),
        name="t_back",
        realm_id=realm,
        internal_properties={"metadata-location": metadata_file},
    )


def _run_parent(store: Metastore, wh: Warehouse, task: NewTask, records: Path) -> TaskOutcome:
    with Runner(store, wh.config, resolver=wh.resolver, deletion_record=records.as_uri()) as runner:
        decision = runner.start(task.realm_id, task.id, operator=True)
        assert decision.lease is not None, decision.message
        return runner.execute(decision.lease, decoded=decision.decoded)


def _all_exist(wh: Warehouse, files: set[str]) -> bool:
    return all(wh.exists(f) for f in files)


def test_a_table_re_registered_from_its_last_metadata_file_ends_its_purge_as_restored(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    table, parent, child, files = _dropped(metastore, local_warehouse)
    live_id = _register(metastore, table, table.metadata_location)

    outcome = _run_parent(metastore, local_warehouse, parent, tmp_path / "records")

    assert outcome.status is Status.RESTORED and not outcome.ok and not outcome.permanent
    assert outcome.restored_as is not None
    assert f"'t_back' (POLARIS/{live_id}" in outcome.restored_as
    assert _all_exist(local_warehouse, files), "a file of the restored table was deleted"
    # The parent and its child, ended; the live table's row untouched.
    assert metastore.list_tasks() == []
    [record_file] = (tmp_path / "records" / "POLARIS" / str(parent.id)).glob("restore-*.json")
    record = json.loads(record_file.read_text())
    assert record["restored_as"] == outcome.restored_as
    assert record["metadata_file"] == table.metadata_location
    assert record["tasks_ended"] == [f"POLARIS/{parent.id}", f"POLARIS/{child.id}"]
    # Every surface says restored and names the live entity.
    shown = outcome.evolve(task=outcome.task)
    assert cli_line(shown).startswith("restored ") and f"POLARIS/{live_id}" in cli_line(shown)
    assert outcome_json(shown)["status"] == "restored"
    assert outcome_json(shown)["restored_as"] == outcome.restored_as
    assert step_output(shown)["restored_as"] == outcome.restored_as
    assert "restored" in log_line(shown) and "nothing deleted" in log_line(shown)
    meta = PolarisTranslator().done_metadata(outcome, outcome.task)
    assert meta["status"] == "restored"
    assert outcome.restored_as in meta[RESTORED_AS].value


def test_the_sweep_says_restored_in_text_and_json_and_is_no_failure(
    metastore: Metastore, local_warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("POLARIS_PIPELINE_REALMS", "POLARIS_PIPELINE_GRACE_MS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    table = local_warehouse.build("t", appends=2)
    files = table_files(table)
    # Past the CLI's default grace period.
    metastore.insert_tasks([drop_table_task(table, create_timestamp=metastore.now_ms() - 600_000)])
    # Spelt file:/ by another client: the same file.
    _register(metastore, table, "file:" + table.metadata_location.removeprefix("file://"))
    plan = io.StringIO()
    main(["sweep", "--dry-run", "--metastore", url_of(metastore), "--json"], out=plan)
    assert "restored as live table-like 't_back'" in plan.getvalue(), plan.getvalue()
    out = io.StringIO()

    code = main(["sweep", "--metastore", url_of(metastore), "--json"], out=out)

    doc = json.loads(out.getvalue())
    assert code == 0, out.getvalue()
    [root] = [o for o in doc["outcomes"] if o["role"] == "root"]
    assert root["status"] == "restored" and "'t_back'" in root["restored_as"]
    assert doc["restored"] >= 1 and doc["dead"] == 0 and doc["failed"] == 0
    assert _all_exist(local_warehouse, files)
    assert metastore.list_tasks() == []


def test_a_child_finding_its_table_restored_ends_the_whole_purge(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    """Re-registered after the parent planned: the first child's guard finds it, by the
    metadata file its parent handed down, and ends the parent's family."""
    table = local_warehouse.build("t", appends=2)
    files = table_files(table)
    parent = drop_table_task(table)
    metastore.insert_tasks([parent])
    with Runner(metastore, local_warehouse.config, resolver=local_warehouse.resolver) as runner:
        decision = runner.start("POLARIS", parent.id, operator=True)
        assert decision.lease is not None
        planned = runner.execute(decision.lease, decoded=decision.decoded)
        assert planned.status is Status.DONE and planned.children
        _register(metastore, table, table.metadata_location)

        first = runner.execute(planned.children[0])

    assert first.status is Status.RESTORED and "'t_back'" in (first.restored_as or "")
    assert metastore.list_tasks() == []
    assert _all_exist(local_warehouse, files)


def test_a_live_table_of_another_metadata_file_at_the_location_stays_refused(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    table, parent, child, files = _dropped(metastore, local_warehouse)
    other = table.metadata_location.rsplit("/", 1)[0] + "/00099-other.metadata.json"
    _register(metastore, table, other)

    outcome = _run_parent(metastore, local_warehouse, parent, tmp_path / "records")

    assert (outcome.status, outcome.permanent) == (Status.DEAD, True), outcome.error
    assert outcome.restored_as is None
    assert outcome.error is not None and "SharedLocationRefusal" in outcome.error
    assert {t.id for t in metastore.list_tasks()} == {parent.id, child.id}
    assert _all_exist(local_warehouse, files)


def test_a_live_table_of_the_same_file_in_another_realm_is_another_table(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    table, parent, child, files = _dropped(metastore, local_warehouse)
    _register(metastore, table, table.metadata_location, realm="OTHER")

    outcome = _run_parent(metastore, local_warehouse, parent, tmp_path / "records")

    assert (outcome.status, outcome.permanent) == (Status.DEAD, True), outcome.error
    assert outcome.error is not None and "OTHER/" in outcome.error
    assert {t.id for t in metastore.list_tasks()} == {parent.id, child.id}
    assert _all_exist(local_warehouse, files)


def test_a_view_re_registered_from_its_metadata_file_is_restored_too(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    location = f"{local_warehouse.uri}/ns/v"
    io = local_warehouse.catalog._load_file_io(location=location)
    metadata = write_view_metadata(location, io)
    view = drop_task(DropSpec(("ns",), "v", metadata, location, is_view=True))
    metastore.insert_tasks([view])
    live_entity(metastore, location, name="v", internal_properties={"metadata-location": metadata})

    outcome = _run_parent(metastore, local_warehouse, view, tmp_path / "records")

    assert outcome.status is Status.RESTORED and "'v'" in (outcome.restored_as or "")
    assert local_warehouse.exists(metadata)
    assert metastore.list_tasks() == []


def test_the_task_job_succeeds_and_its_step_metadata_and_tag_say_restored(
    store: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    table = local_warehouse.build("t", appends=2)
    files = table_files(table)
    task = drop_table_task(table)
    store.insert_tasks([task])
    _register(store, table, table.metadata_location)

    result = run_task_job(store, instance, task.id, [local_warehouse.uri])

    assert result.success
    assert _all_exist(local_warehouse, files) and store.list_tasks() == []
    said = [
        str(entry.value)
        for event in result.all_events
        if event.event_type_value == "STEP_OUTPUT"
        for key, entry in event.step_output_data.metadata.items()
        if key == RESTORED_AS
    ]
    assert said and "'t_back'" in said[0] and "nothing deleted" in said[0], said
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags.get(TAG_OUTCOME) == OUTCOME_RESTORED


def test_the_operator_s_override_never_deletes_a_restored_table(
    metastore: Metastore, local_warehouse: Warehouse, tmp_path: Path
) -> None:
    """``allowSharedLocation`` lets a purge go past another table, never past the dropped
    table itself live again."""
    table = local_warehouse.build("t", appends=2)
    files = table_files(table)
    task = drop_table_task(table)
    task.properties[Prop.ALLOW_SHARED_LOCATION] = "true"
    metastore.insert_tasks([task])
    _register(metastore, table, table.metadata_location)

    outcome = _run_parent(metastore, local_warehouse, task, tmp_path / "records")

    assert outcome.status is Status.RESTORED
    assert _all_exist(local_warehouse, files)


def test_a_table_whose_child_found_it_restored_is_reported_restored_not_done(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    """The CLI's path (``execute_tree``): the table is said restored, its last stage does
    not run, and no child after the one that found it is started."""
    table = local_warehouse.build("t", appends=2)
    files = table_files(table)
    parent = drop_table_task(table)
    metastore.insert_tasks([parent])

    class RegisteredAfterPlanning(Runner):
        def execute(self, lease: Lease, **kwargs: Any) -> TaskOutcome:
            outcome = super().execute(lease, **kwargs)
            if lease.task_id == parent.id:
                _register(metastore, table, table.metadata_location)
            return outcome

    with RegisteredAfterPlanning(
        metastore, local_warehouse.config, resolver=local_warehouse.resolver
    ) as runner:
        decision = runner.start("POLARIS", parent.id, operator=True)
        assert decision.lease is not None
        root, *children = execute_tree(runner, decision.lease)

    assert root.status is Status.RESTORED and "'t_back'" in (root.restored_as or "")
    assert root.finish is None
    assert [c.status for c in children] == [Status.RESTORED]
    assert metastore.list_tasks() == []
    assert _all_exist(local_warehouse, files)


def test_a_table_run_whose_child_found_it_restored_is_tagged_restored(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    """The task job's path: the table is re-registered after its root step planned (a
    success hook on that step), so a child step finds it; the run says restored."""
    table = local_warehouse.build("t", appends=2)
    files = table_files(table)
    task = drop_table_task(table)
    metastore.insert_tasks([task])

    @success_hook
    def register_after_planning(context: HookContext) -> None:
        if context.op.name == ROOT_STEP:
            _register(metastore, table, table.metadata_location)

    job = polaris_task_job.with_hooks({register_after_planning})
    result = job.execute_in_process(
        run_config=run_config_for("POLARIS", task.id, entity_version=1),
        instance=instance,
        resources={
            "metastore": metastore_resource(metastore),
            "storage": PolarisStorageResource(allowed_prefixes=[local_warehouse.uri]),
        },
        raise_on_error=False,
    )

    assert result.success
    assert _all_exist(local_warehouse, files) and metastore.list_tasks() == []
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags.get(TAG_OUTCOME) == OUTCOME_RESTORED
