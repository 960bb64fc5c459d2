"""``TaskOutcome`` is never edited, and ``TableFinish`` (a table waiting for its
children) goes from one Dagster step to the next and back whole, or not at all."""

from __future__ import annotations

import dataclasses

import pytest

from polaris_pipeline.execution.outcome import Status, TableFinish, TaskOutcome
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.unreferenced.mode import UnreferencedMode

LEASE = Lease("POLARIS", 7, "exec-1", 2, 5, 1_000, task_type_code="4", name="entityCleanup_7")
ROW = TaskRow("POLARIS", 7, "entityCleanup_7", 5, 1, 900, 1_000, {"data": "{}"})


def test_an_outcome_is_never_edited_only_evolved() -> None:
    outcome = TaskOutcome(LEASE, Status.DONE, "4", children=(LEASE,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.status = Status.FAILED  # type: ignore[misc]
    failed = outcome.evolve(status=Status.FAILED, error="boom")
    assert (failed.status, failed.error, failed.children) == (Status.FAILED, "boom", (LEASE,))
    assert (outcome.status, outcome.error) == (Status.DONE, None)  # the original stands
    with pytest.raises(TypeError):
        outcome.evolve(no_such_field=1)


@pytest.mark.parametrize("mode", [UnreferencedMode.DELETE, UnreferencedMode.REPORT])
@pytest.mark.parametrize("row", [ROW, None])
def test_a_table_finish_goes_to_the_last_step_and_back_whole(
    mode: UnreferencedMode, row: TaskRow | None
) -> None:
    finish = TableFinish(LEASE, mode, DecodedTask.from_row(row) if row is not None else None)
    assert TaskOutcome(LEASE, Status.DONE, finish=finish).deferred
    assert not TaskOutcome(LEASE, Status.DONE).deferred
    back = TableFinish.from_dict(finish.to_dict())
    assert (back.lease, back.mode, back.row) == (LEASE, mode, row)
    assert back.to_dict() == finish.to_dict()
    # The last step decodes the row it is handed; the decoding itself never travels.
    assert (back.task is None) == (row is None)
    assert back.task is None or back.task.problem == "properties have no taskType"


def test_the_finish_of_a_run_made_before_it_had_a_type_reads_the_same() -> None:
    # The root step's ``table`` output as runs already made carry it.
    data = {"lease": LEASE.to_dict(), "mode": "delete", "row": dataclasses.asdict(ROW)}
    finish = TableFinish.from_dict(data)
    assert (finish.lease, finish.mode, finish.row) == (LEASE, UnreferencedMode.DELETE, ROW)
    assert finish.to_dict() == data


@pytest.mark.parametrize(
    "broken",
    [
        {"mode": None},  # no mode: no "delete" assumed
        {"mode": "purge"},
        {"lease": {"realm_id": "POLARIS", "task_id": "7"}},  # no holder
    ],
)
def test_a_malformed_finish_is_refused_not_guessed(broken: dict[str, object]) -> None:
    finish = TableFinish(LEASE, UnreferencedMode.DELETE, DecodedTask.from_row(ROW))
    data = {**finish.to_dict(), **broken}
    with pytest.raises(ValueError):
        TableFinish.from_dict(data)
