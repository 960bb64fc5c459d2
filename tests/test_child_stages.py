"""The engine's child stage plan (``cleanup/stages.py``): stages as data, the stage of an
orphaned child, and the runner going stage by stage."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from builders import tasks as built_tasks
from builders.tasks import dropped_entity_json
from polaris_pipeline.cleanup import dispatch
from polaris_pipeline.cleanup.children import new_child
from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.stages import (
    CHILD_STAGES,
    CURRENT_METADATA,
    MANIFESTS,
    METADATA,
    ChildStage,
    check_plan,
    in_plan_order,
    leases_in_stages,
    orphan_stage,
)
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks import payloads
from polaris_pipeline.tasks.model import NewTask, TaskType
from polaris_pipeline.tasks.ref import Lease
from tests.support.handlers import replace_table_handler
from tests.support.iceberg import Warehouse, drop_task_row

OLD_MS = 10 * 60_000
TABLE = payloads.TableIdentifier(("ns",), "t")


def _lease(i: int) -> Lease:
    return Lease("r", i, "ex", 1, 1, 0, "3", f"child-{i}")


def _task(i: int) -> NewTask:
    return NewTask("r", i, f"child-{i}", {}, {})


def _ids(staged: list[tuple[ChildStage, list[Lease]]]) -> list[tuple[str, list[int]]]:
    return [(stage.name, [lease.task_id for lease in leases]) for stage, leases in staged]


# -- the plan ------------------------------------------------------------------------


def test_every_stage_of_the_plan_comes_in_its_order_empty_ones_too() -> None:
    staged = in_plan_order([(CURRENT_METADATA, ["last"]), (MANIFESTS, ["m1", "m2"])])
    assert staged == [(MANIFESTS, ["m1", "m2"]), (METADATA, []), (CURRENT_METADATA, ["last"])]
    assert [stage for stage, _ in in_plan_order([])] == list(CHILD_STAGES)


def test_a_stage_outside_the_plan_is_refused() -> None:
    extra = ChildStage("extra", "Not in the plan.")
    with pytest.raises(ValueError, match="'extra' is not in the plan"):
        in_plan_order([(extra, [1])])
    assert in_plan_order([(extra, [1])], (extra,)) == [(extra, [1])]


def test_a_plan_has_distinct_stages_named_as_identifiers() -> None:
    with pytest.raises(ValueError, match="distinct stages"):
        check_plan([])
    with pytest.raises(ValueError, match="distinct stages"):
        check_plan([MANIFESTS, ChildStage("manifest", "The same name again.")])
    with pytest.raises(ValueError, match="not a lower-case identifier"):
        ChildStage("current metadata", "A name no Dagster step can carry.")


def test_leases_keep_the_handlers_stages_and_their_creation_order() -> None:
    tasks = [_task(i) for i in range(1, 7)]
    staged = in_plan_order(
        [(CURRENT_METADATA, tasks[5:]), (MANIFESTS, tasks[:2]), (METADATA, tasks[2:5])]
    )
    # Created in another order than the stages: the stages decide.
    leases = [_lease(i) for i in (6, 2, 5, 1, 4, 3)]
    assert _ids(leases_in_stages(staged, leases)) == [
        ("manifest", [2, 1]),
        ("metadata", [5, 4, 3]),
        ("current_metadata", [6]),
    ]


def test_leases_no_stage_names_are_one_stage_the_first() -> None:
    staged = in_plan_order([(METADATA, [_task(2)])])
    assert _ids(leases_in_stages(staged, [_lease(1), _lease(2), _lease(3)])) == [
        ("manifest", [1, 3]),
        ("metadata", [2]),
        ("current_metadata", []),
    ]


# -- the stage of an orphaned child --------------------------------------------------


def _batch_row(files: list[str], *, with_type: bool = True) -> NewTask:
    data = payloads.encode_batch_cleanup(
        payloads.BatchCleanupPayload(TABLE, tuple(files)), with_type=with_type
    )
    return NewTask(
        "POLARIS",
        new_entity_id(),
        payloads.batch_cleanup_task_name("entityCleanup_7", files),
        payloads.task_properties(TaskType.BATCH_FILE_CLEANUP, data),
        {"storageLocation": "file:///wh/ns/t"},
    )


@pytest.mark.parametrize(
    ("files", "with_type", "stage"),
    [
        (["file:///wh/ns/t/metadata/00003-1f2e.metadata.json"], True, CURRENT_METADATA),
        (["s3://b/ns/t/metadata/00004-9a8b.gz.metadata.json"], False, CURRENT_METADATA),
        (["file:///wh/ns/t/metadata/snap-1-1-abc.avro"], True, METADATA),
        (
            [
                "file:///wh/ns/t/metadata/00001-aa.metadata.json",
                "file:///wh/ns/t/metadata/00002-bb.metadata.json",
            ],
            True,
            METADATA,
        ),
        (["file:///wh/ns/t/metadata/00001-aa.metadata.json.bak"], True, METADATA),
        ([], True, METADATA),
    ],
)
def test_a_batch_child_runs_last_only_when_it_holds_one_metadata_file(
    files: list[str], with_type: bool, stage: ChildStage
) -> None:
    assert orphan_stage(built_tasks.task_row(_batch_row(files, with_type=with_type))) is stage


def test_an_orphan_that_does_not_decode_runs_with_the_batches() -> None:
    row = _batch_row(["file:///wh/ns/t/metadata/00003-1f2e.metadata.json"])
    row.properties["data"] = '{"tableId": '
    assert orphan_stage(built_tasks.task_row(row)) is METADATA


def test_an_orphans_stage_is_the_one_its_table_cleanup_gave_it(
    local_warehouse: Warehouse,
) -> None:
    """The rule read back from each child's row agrees with the handler that made it."""
    table = local_warehouse.build("t", partitioned=True, with_deletes=True, with_statistics=True)
    created: list[NewTask] = []

    def create(children: Sequence[NewTask]) -> Sequence[NewTask]:
        created.extend(children)
        return children

    ctx = CleanupContext(
        task=drop_task_row(table),
        resolver=local_warehouse.resolver,
        config=local_warehouse.config,
        create_children=create,
        # One batch of metadata-level files: none of them falls alone into a batch.
        metadata_batch_size=1000,
    )
    result = dispatch.run_cleanup(ctx)
    assert result.ok and created == result.children
    assert all(children for _, children in result.child_stages)
    for stage, children in result.child_stages:
        assert {orphan_stage(built_tasks.task_row(c)) for c in children} == {stage}


# -- the runner follows the stages -----------------------------------------------------


def test_a_sweep_runs_the_children_stage_by_stage_not_in_creation_order(
    metastore: Metastore, local_warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = f"{local_warehouse.uri}/ns/t"
    made: list[NewTask] = []

    def backwards(ctx: CleanupContext) -> CleanupTally:
        """Creates three batch children, then puts the first created in the last stage."""
        children = []
        for i in range(3):
            data = payloads.encode_batch_cleanup(
                payloads.BatchCleanupPayload(TABLE, (f"{root}/gone-{i}.avro",))
            )
            name = payloads.batch_cleanup_task_name(ctx.task.name, [f"gone-{i}"])
            children.append(new_child(ctx, TaskType.BATCH_FILE_CLEANUP, name, data))
        assert ctx.create_children is not None
        ctx.create_children(children)
        made.extend(children)
        result = CleanupTally.start()
        first, second, third = children
        result.child_stages = in_plan_order(
            [(CURRENT_METADATA, [first]), (METADATA, [second]), (MANIFESTS, [third])]
        )
        return result

    replace_table_handler(monkeypatch, backwards)
    parent = NewTask(
        "POLARIS",
        new_entity_id(),
        "entityCleanup_42",
        payloads.task_properties(TaskType.ENTITY_CLEANUP_SCHEDULER, dropped_entity_json()),
        {"storageLocation": root},
        metastore.now_ms() - OLD_MS,
    )
    metastore.insert_tasks([parent])

    with Runner(metastore, local_warehouse.config, resolver=local_warehouse.resolver) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    assert all(o.ok for o in outcomes)
    first, second, third = made
    assert [o.lease.task_id for o in outcomes] == [parent.id, third.id, second.id, first.id]
    assert metastore.list_tasks() == []
