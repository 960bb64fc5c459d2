"""The task job's graph is made from the engine's child stage plan: one slot per stage,
each stage done before the next starts, empty stages included. Real runs: a real
metastore, pyiceberg tables on local files, a Dagster instance on SQLite."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from dagster import DagsterInstance

from builders import tasks as built_tasks
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.stages import (
    CHILD_STAGES,
    CURRENT_METADATA,
    MANIFESTS,
    METADATA,
    ChildStage,
    in_plan_order,
)
from polaris_pipeline.cleanup.table import run_table_cleanup
from polaris_pipeline.dagster.task_job import build_polaris_task_job, polaris_task_job
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask
from tests.support.dagster import child_summaries, metastore_resource
from tests.support.handlers import replace_table_handler
from tests.support.iceberg import Warehouse, table_files
from tests.support.table_metadata import content_files
from tests.support.task_job import OLD_MS, drop, step_events, storage_resource, sweep

MORE_MANIFESTS = ChildStage("more_manifest", "The second half of the manifest children.")
NOTHING = ChildStage("nothing", "A stage no handler puts a child in.")


def _stage_steps(plan: Sequence[ChildStage]) -> list[str]:
    return [f"run_{stage.name}_children[" for stage in plan]


def assert_stages_in_order(
    instance: DagsterInstance, run_id: str, plan: Sequence[ChildStage]
) -> None:
    """Every step of each stage succeeded before any step of the next one started."""
    events = step_events(instance, run_id)
    for earlier, later in zip(_stage_steps(plan), _stage_steps(plan)[1:], strict=False):
        done = [
            ts for kind, key, ts in events if kind == "STEP_SUCCESS" and key.startswith(earlier)
        ]
        started = [ts for kind, key, ts in events if kind == "STEP_START" and key.startswith(later)]
        assert done and started, (earlier, later)
        assert max(done) <= min(started), f"{later} started before {earlier} finished"


def _run_small_steps(job: Any, request: Any, instance: DagsterInstance, **resources: Any) -> Any:
    """The run, one child to a step: many steps per stage to keep in order."""
    config = request.run_config["ops"]["run_polaris_task"]["config"]
    return job.execute_in_process(
        run_config={"ops": {"run_polaris_task": {"config": {**config, "children_per_step": 1}}}},
        tags=request.tags,
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )


def _purge_in_stages(
    metastore: Metastore,
    warehouse: Warehouse,
    instance: DagsterInstance,
    victim: Any,
    plan: tuple[ChildStage, ...],
) -> Any:
    """Drop ``victim``, run its cleanup with a job built from ``plan``, check it is purged."""
    victim_files = table_files(victim)
    drop(metastore, victim)
    resource = metastore_resource(metastore)
    job = build_polaris_task_job(f"polaris_task_job_{len(plan)}_stages", stages=plan)

    [request] = sweep(resource, instance)
    result = _run_small_steps(
        job, request, instance, metastore=resource, storage=storage_resource(warehouse)
    )

    assert result.success
    assert not any(warehouse.exists(f) for f in victim_files)
    assert metastore.list_tasks() == []
    return result


def test_the_graph_has_one_slot_per_stage_of_the_engines_plan() -> None:
    nodes = {node.name for node in polaris_task_job.graph.nodes}
    assert nodes == {
        "run_polaris_task",
        "run_manifest_children",
        "release_metadata_children",
        "run_metadata_children",
        "release_current_metadata_children",
        "run_current_metadata_children",
        # A dropped table's unreferenced files, after its last stage.
        "finish_polaris_table",
    }
    root = polaris_task_job.graph.node_named("run_polaris_task").definition
    assert list(root.output_dict) == [
        "outcome",
        *(f"{stage.name}_children" for stage in CHILD_STAGES),
        "table",
    ]
    # Each stage's steps say what they delete, in the engine's words.
    for stage in CHILD_STAGES:
        description = polaris_task_job.graph.node_named(f"run_{stage.name}_children").definition
        assert stage.description in (description.description or "")


def test_the_job_follows_a_plan_of_four_stages(
    metastore: Metastore,
    local_warehouse: Warehouse,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fourth stage in the plan is a fourth slot, without a change to the job."""
    plan = (MANIFESTS, MORE_MANIFESTS, METADATA, CURRENT_METADATA)

    def split_manifests(ctx: CleanupContext) -> CleanupTally:
        # The table cleanup, its manifest children over two stages.
        result = run_table_cleanup(ctx)
        staged = dict(result.child_stages)
        half = len(staged[MANIFESTS]) // 2
        result.child_stages = in_plan_order(
            [
                (MANIFESTS, staged[MANIFESTS][:half]),
                (MORE_MANIFESTS, staged[MANIFESTS][half:]),
                (METADATA, staged[METADATA]),
                (CURRENT_METADATA, staged[CURRENT_METADATA]),
            ],
            plan,
        )
        return result

    replace_table_handler(monkeypatch, split_manifests)
    victim = local_warehouse.build("victim", partitioned=True, with_deletes=True, appends=2)

    result = _purge_in_stages(metastore, local_warehouse, instance, victim, plan)

    first, more = (child_summaries(result, f"run_{s.name}_children") for s in plan[:2])
    assert len(first) >= 2 and len(more) >= len(first)
    assert {o["task_type"] for o in first + more} == {"manifest_file_cleanup"}
    [last] = child_summaries(result, "run_current_metadata_children")
    assert last["deleted"] == 1
    assert_stages_in_order(instance, result.run_id, plan)


def test_an_empty_middle_stage_still_lets_the_stages_after_it_run(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    plan = (MANIFESTS, NOTHING, METADATA, CURRENT_METADATA)
    victim = local_warehouse.build("victim", appends=2)

    result = _purge_in_stages(metastore, local_warehouse, instance, victim, plan)

    # The empty stage is one step of no child, between the stages around it.
    assert result.output_for_node("run_nothing_children") == {
        "none": {"tasks": [], "deleted": 0, "bytes_freed": 0}
    }
    assert_stages_in_order(instance, result.run_id, plan)


def test_orphans_run_in_the_stages_the_engine_gives_them(
    metastore: Metastore, local_warehouse: Warehouse, instance: DagsterInstance
) -> None:
    """Orphaned manifest children and the current metadata file's child, no other batch:
    the middle stage of the engine's own plan is empty, and the metadata file goes last."""
    victim = local_warehouse.build("victim", partitioned=True, appends=2)
    content = content_files(victim)
    old = metastore.now_ms() - OLD_MS
    parent = built_tasks.drop_table_task(victim, realm_id="POLARIS", create_timestamp=old)
    created: list[NewTask] = []

    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        created.extend(children)
        return children

    # The parent planned its children and is gone; its batches of metadata files are too.
    planned = run_table_cleanup(
        CleanupContext(
            task=built_tasks.task_row(parent),
            resolver=local_warehouse.resolver,
            config=local_warehouse.config,
            create_children=create,
        )
    )
    staged = dict(planned.child_stages)
    kept = staged[MANIFESTS] + staged[CURRENT_METADATA]
    # Written in an order the stages are not in: the engine's rule decides.
    metastore.insert_tasks([dataclasses.replace(t, create_timestamp=old) for t in reversed(kept)])
    resource = metastore_resource(metastore)

    [request] = sweep(resource, instance)
    assert request.tags["polaris/tasks"] == str(len(kept))
    result = _run_small_steps(
        polaris_task_job,
        request,
        instance,
        metastore=resource,
        storage=storage_resource(local_warehouse),
    )

    assert result.success
    assert metastore.list_tasks() == []
    manifests = child_summaries(result, "run_manifest_children")
    assert {o["task_id"] for o in manifests} == {str(t.id) for t in staged[MANIFESTS]}
    assert child_summaries(result, "run_metadata_children") == []
    [last] = child_summaries(result, "run_current_metadata_children")
    assert last["task_id"] == str(staged[CURRENT_METADATA][0].id) and last["deleted"] == 1
    assert not local_warehouse.exists(victim.metadata_location)
    assert content and not any(local_warehouse.exists(f) for f in content)
    assert_stages_in_order(instance, result.run_id, CHILD_STAGES)
