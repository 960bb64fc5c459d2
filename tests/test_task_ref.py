"""TaskRef and Lease: built from a row in one place, carried as a dict through run config."""

from __future__ import annotations

import pytest

from polaris_pipeline.tasks.model import Prop, TaskRow
from polaris_pipeline.tasks.ref import Lease, TaskRef

# A lease's dict exactly as Dagster run configs have carried it (dagster/task_job.py's
# ``lease_to_dict`` before the type had its own): old run configs must still read.
TODAYS_LEASE_DICT = {
    "realm_id": "POLARIS",
    "task_id": "3008983788998583856",
    "executor_id": "run-abc",
    "attempt": 2,
    "entity_version": 7,
    "start_time_ms": 1_700_000_000_000,
    "name": "cleanup-t",
    "task_type": "2",
}


def _row(props: dict[str, str], **over: object) -> TaskRow:
    fields: dict[str, object] = {
        "realm_id": "POLARIS",
        "id": 3008983788998583856,
        "name": "cleanup-t",
        "entity_version": 7,
        "grant_records_version": 1,
        "create_timestamp": 1,
        "last_update_timestamp": 1,
        "properties": props,
    }
    fields.update(over)
    return TaskRow(**fields)  # type: ignore[arg-type]


HELD = {
    Prop.TASK_TYPE: "2",
    Prop.EXECUTOR: "run-abc",
    Prop.START_TIME: "1700000000000",
    Prop.ATTEMPT_COUNT: "2",
}


def test_a_lease_reads_from_the_row_that_records_it() -> None:
    lease = Lease.from_row(_row(HELD))
    assert lease == Lease(
        "POLARIS", 3008983788998583856, "run-abc", 2, 7, 1_700_000_000_000, "2", "cleanup-t"
    )
    assert lease.ref == TaskRef.from_row(_row(HELD))
    assert lease.ref == TaskRef("POLARIS", 3008983788998583856, 7, "cleanup-t", "2")
    assert lease.label == lease.ref.label == "POLARIS/3008983788998583856 'cleanup-t'"


@pytest.mark.parametrize(
    "props",
    [
        {Prop.TASK_TYPE: "2"},  # never leased
        {**HELD, Prop.EXECUTOR: ""},  # an empty executor id is no holder
        {Prop.EXECUTOR: "run-abc", Prop.ATTEMPT_COUNT: "1"},  # no start time
        {Prop.EXECUTOR: "run-abc", Prop.START_TIME: "soon"},  # a start that is no number
    ],
)
def test_a_row_recording_no_holder_gives_no_lease(props: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="records no lease holder"):
        Lease.from_row(_row(props))


def test_hostile_attempt_counts_read_as_zero() -> None:
    for count in ("many", "-3", "1e3", ""):
        assert Lease.from_row(_row({**HELD, Prop.ATTEMPT_COUNT: count})).attempt == 0
    assert (
        Lease.from_row(_row({k: v for k, v in HELD.items() if k != Prop.ATTEMPT_COUNT})).attempt
        == 0
    )


def test_todays_lease_dict_reads_and_is_written_unchanged() -> None:
    lease = Lease.from_dict(TODAYS_LEASE_DICT)
    assert lease == Lease.from_row(_row(HELD))
    assert lease.to_dict() == TODAYS_LEASE_DICT
    # A child's entry in the run config: a reference, read from a lease's dict too.
    assert TaskRef.from_dict(TODAYS_LEASE_DICT) == lease.ref
    assert TaskRef.from_dict(lease.ref.to_dict()) == lease.ref
    assert set(lease.ref.to_dict()) == set(TODAYS_LEASE_DICT) - {
        "executor_id",
        "attempt",
        "start_time_ms",
    }


def test_a_reference_needs_only_where_the_task_is() -> None:
    ref = TaskRef.from_dict({"realm_id": "r", "task_id": 5})
    assert ref == TaskRef("r", 5, 0, "", None)
    assert TaskRef.from_dict(
        {"realm_id": "r", "task_id": " 5 ", "name": None, "task_type": 3}
    ) == TaskRef("r", 5, 0, "", "3")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task_id": None}, "no 'task_id'"),
        ({"realm_id": None}, "no 'realm_id'"),
        ({"task_id": "12abc"}, "'task_id' is not an integer"),
        ({"task_id": True}, "'task_id' must be an integer"),
        ({"attempt": 1.5}, "'attempt' must be an integer"),
        ({"entity_version": None}, "no 'entity_version'"),
        ({"start_time_ms": "later"}, "'start_time_ms' is not an integer"),
        ({"executor_id": None}, "no 'executor_id'"),
        ({"executor_id": ""}, "empty executor id"),
    ],
)
def test_a_malformed_lease_dict_names_its_fault(change: dict[str, object], message: str) -> None:
    data = {**TODAYS_LEASE_DICT, **change}
    with pytest.raises(ValueError, match=message):
        Lease.from_dict(data)


def test_a_lease_from_a_reference_keeps_the_reference() -> None:
    ref = TaskRef("r", 9, 4, "n", "3")
    lease = Lease.of(ref, executor_id="ex", attempt=1, start_time_ms=10)
    assert lease.ref == ref
    assert (lease.executor_id, lease.attempt, lease.start_time_ms) == ("ex", 1, 10)
    with pytest.raises(ValueError, match="empty executor id"):
        Lease.of(ref, executor_id="", attempt=1, start_time_ms=10)
