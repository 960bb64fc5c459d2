"""``OutcomeTotals``: the one total of what tasks did, its metadata and its one line."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from typing import Any

import pytest

from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.execution.runner import Status, TaskOutcome
from polaris_pipeline.report.fields import BY_STATUS, OUTCOME_FIELDS, SIZES_UNREPORTED, STATUS
from polaris_pipeline.report.totals import (
    RECORD_NUMBERS,
    OutcomeTotals,
    RunningTotals,
    format_counts,
)
from polaris_pipeline.tasks.ref import Lease

CHILD_TASKS = next(f.label for f in OUTCOME_FIELDS if f.attr == "child_tasks")


def lease(task_id: int, realm: str = "R") -> Lease:
    return Lease(realm, task_id, "exec", 1, 1, 0, name=f"t{task_id}")


def outcome(
    task_id: int,
    status: Status = Status.DONE,
    *,
    deleted: int = 0,
    missing: int = 0,
    freed: int | None = 0,
    refused: int = 0,
    children: tuple[int, ...] = (),
    permanent: bool = False,
) -> TaskOutcome:
    result = CleanupResult(
        deleted=deleted,
        missing=missing,
        bytes_freed=freed,
        refused=[GuardRefusal(f"/x/{i}", "outside") for i in range(refused)],
    )
    return TaskOutcome(
        lease(task_id),
        status,
        result=result,
        children=[lease(c) for c in children],
        permanent=permanent,
    )


# A table cleanup with three children (one dead), and a batch refused by the guard.
SWEEP = [
    outcome(1, children=(11, 12, 13)),
    outcome(11, deleted=4, freed=4096),
    outcome(12, deleted=2, missing=1, freed=None),  # storage without sizes
    outcome(13, Status.DEAD, refused=1, permanent=True),
    outcome(2, Status.DEAD, deleted=1, freed=10, refused=2, permanent=True),
]


def a_sweep() -> OutcomeTotals:
    return OutcomeTotals.of(SWEEP)


def test_a_sweep_tells_roots_from_the_children_they_created() -> None:
    totals = a_sweep()
    assert dict(totals.tasks) == {"done": 1, "dead": 1}
    assert dict(totals.children) == {"done": 2, "dead": 1}
    assert (totals.files_deleted, totals.files_missing, totals.refused) == (7, 1, 3)
    assert totals.bytes_freed == 4106 and totals.bytes_unknown
    assert totals.children_created == 3 and totals.child_tasks == 3
    assert totals.failed == 2 and totals.permanent == 2


def test_the_one_line_and_the_tasks_text() -> None:
    totals = a_sweep()
    assert totals.line() == (
        "7 file(s) deleted, 1 already gone, 3 refused, 4.0 KiB or more freed; "
        "children: 2 done, 1 dead"
    )
    assert totals.tasks_text() == "5 task(s): 3 done, 2 dead"
    assert OutcomeTotals().line() == (
        "0 file(s) deleted, 0 already gone, 0 refused, 0 B freed; children: none"
    )
    assert OutcomeTotals().tasks_text() == "0 task(s): none"


def test_counts_put_the_runners_statuses_first_and_in_words() -> None:
    counts = {"skipped": 1, "lease-lost": 2, "already-done": 3, "failed": 0, "done": 4}
    assert format_counts(counts) == "4 done, 2 lease lost, 3 already done, 1 skipped"
    assert format_counts({}) == "none"


def test_the_display_labels_of_a_root_and_of_a_group() -> None:
    root = OutcomeTotals.of([outcome(1, children=(11, 12))])
    group = OutcomeTotals.of(
        [outcome(11, deleted=3, freed=30), outcome(12, missing=2, freed=None)], child=True
    )
    root_meta = {STATUS: "done", **root.metadata()}
    assert root_meta[CHILD_TASKS] == 2 and BY_STATUS not in root_meta
    group_meta = group.metadata()
    assert group_meta[BY_STATUS] == {"done": 2} and group_meta[CHILD_TASKS] == 2
    assert group_meta[SIZES_UNREPORTED] == 1


def test_the_record_reads_back_to_the_same_total() -> None:
    root = OutcomeTotals.of([outcome(1, children=(11, 12))])
    group = OutcomeTotals.of(
        [outcome(11, deleted=3, freed=30), outcome(12, missing=2, freed=None)], child=True
    )
    run = OutcomeTotals()
    for step in (root, group):
        run += OutcomeTotals.from_record(json.loads(json.dumps(step.to_record())))
    expected = OutcomeTotals.of([outcome(1, children=(11, 12))]) + group
    assert run == expected  # the same numbers, tasks and children
    assert run.line() == (
        "3 file(s) deleted, 2 already gone, 0 refused, 30 B or more freed; children: 2 done"
    )
    sweep = a_sweep()
    assert OutcomeTotals.from_record(sweep.to_record()) == sweep


@pytest.mark.parametrize(
    "record",
    [
        {"files_deleted": -3, "tasks": {"done": 1}},
        {"files_deleted": "3", "tasks": {"done": 1}},
        {"files_deleted": True, "tasks": {"done": 1}},
        {"tasks": {"done": 1, "failed": "2", "dead": -1}, "children": ["done"]},
    ],
)
def test_a_record_number_that_is_not_a_count_reads_as_zero(record: dict[str, Any]) -> None:
    totals = OutcomeTotals.from_record(record)
    assert totals.files_deleted == 0 and dict(totals.tasks) == {"done": 1}
    assert not totals.children


def test_every_number_of_a_total_is_in_its_record() -> None:
    """A number added to OutcomeTotals without a record name would be lost in a run's total."""
    ints = {f.name for f in fields(OutcomeTotals) if f.type == "int"}
    assert set(RECORD_NUMBERS) == ints


def test_adding_adds_everything() -> None:
    a = a_sweep() + a_sweep()
    assert a.files_deleted == 14 and a.sizes_unreported == 2
    assert dict(a.children) == {"done": 4, "dead": 2} and a.children_created == 6


def test_a_running_total_knows_each_childs_parent() -> None:
    """Told one at a time, as a sweep runs them: the same total as all at once."""
    running = RunningTotals()
    parents = [running.add(o) for o in SWEEP]
    assert parents == [None, 1, 1, 1, None]
    assert running.parent_of("R", 12) == 1 and running.parent_of("R", 2) is None
    assert running.parent_of("OTHER", 12) is None  # a child is known by realm and id
    assert running.totals == a_sweep()


def test_a_total_is_never_changed() -> None:
    totals = a_sweep()
    with pytest.raises(dataclasses.FrozenInstanceError):
        totals.files_deleted = 0  # type: ignore[misc]
    assert (totals + a_sweep()).files_deleted == 14 and totals.files_deleted == 7
