"""The outcome renderers, the progress sink and the "nothing available" explanation of ``report/``.

Each is the one wording of its kind: these hold the surfaces that read them
(the CLI's line and JSON, a step's metadata and output, the sensor's reason)
to the one field list and the one set of words.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import OUTCOME_FIELDS, SIZES_UNREPORTED
from polaris_pipeline.report.nothing_available import no_orphans_reason
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.report.outcome_json import outcome_json, totals_json
from polaris_pipeline.report.outcome_line import cli_line, log_line
from polaris_pipeline.report.outcome_metadata import (
    not_run_metadata,
    outcome_metadata,
    per_task_metadata,
    step_output,
)
from polaris_pipeline.report.progress import PROGRESS_INTERVAL_S, ProgressSink, progress_text
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.tasks.model import TaskState
from polaris_pipeline.tasks.ref import Lease


def lease(task_id: int, name: str = "entityCleanup_1") -> Lease:
    return Lease("POLARIS", task_id, "exec-1", 2, 1, 0, task_type_code="3", name=name)


def an_outcome(*, freed: int | None = 2048, status: Status = Status.DONE) -> TaskOutcome:
    result = CleanupResult(
        deleted=3, missing=1, bytes_freed=freed, refused=[GuardRefusal("/x", "outside")]
    )
    return TaskOutcome(
        lease(7), status, "3", result=result, children=[lease(71), lease(72)], error=None
    )


def test_every_surface_names_the_same_numbers() -> None:
    outcome = an_outcome()
    numbers = {f.attr: getattr(OutcomeFacts(outcome), f.attr) for f in OUTCOME_FIELDS}
    assert numbers == {
        "files_deleted": 3,
        "files_missing": 1,
        "bytes_freed": 2048,
        "refused": 1,
        "child_tasks": 2,
    }
    # The step's metadata is what OutcomeTotals writes for the same one outcome.
    assert outcome_metadata(outcome) == OutcomeTotals.of([outcome]).metadata()
    doc = outcome_json(outcome)
    assert (doc["files_deleted"], doc["already_gone"], doc["bytes_freed"]) == (3, 1, 2048)
    assert doc["paths_refused"] == 1 and doc["children"] == ["71", "72"]
    assert doc["role"] == "root" and doc["parent_id"] is None
    output = step_output(outcome)
    assert (output["deleted"], output["bytes_freed"], output["refused"]) == (3, 2048, 1)
    assert output["children"] == 2 and output["task_type"] == "batch_file_cleanup"
    # A group step's entry reads the outcome, as the output does: the same numbers.
    assert per_task_metadata(outcome) == {
        "task id": output["task_id"],
        "type": output["task_type"],
        "status": output["status"],
        "lease attempt": output["attempt"],
        "files deleted": 3,
        "bytes freed": 2048,
    }
    # A task the step ran nothing of: which task, what was found, no numbers.
    assert not_run_metadata("already-done", lease(8)) == {
        "task id": "8",
        "type": "batch_file_cleanup",
        "status": "already-done",
        "lease attempt": 2,
        "files deleted": 0,
        "bytes freed": 0,
    }


def test_storage_without_sizes_is_null_in_json_and_a_lower_bound_in_metadata() -> None:
    outcome = an_outcome(freed=None)
    doc = outcome_json(outcome, parent_id=1)
    assert doc["bytes_freed"] is None and doc["role"] == "child"
    meta = outcome_metadata(outcome)
    assert meta["bytes freed"] == 0 and meta[SIZES_UNREPORTED] == 1
    assert meta == OutcomeTotals.of([outcome]).metadata()
    totals = OutcomeTotals.of([outcome])
    assert totals_json(totals)["bytes_freed"] is None
    assert totals_json(totals)["files_deleted"] == 3 and totals_json(totals)["tasks"] == 1


def test_the_cli_line_and_the_log_line() -> None:
    outcome = an_outcome()
    assert cli_line(outcome) == (
        "done       POLARIS/7 entityCleanup_1  deleted 3 (2.0 KiB), 1 were gone, 2 child task(s)"
    )
    assert cli_line(outcome, 30).endswith("…") and len(cli_line(outcome, 30)) == 30
    assert log_line(outcome, table="ns.t") == (
        "task POLARIS/7 'entityCleanup_1' (batch_file_cleanup) done: 3 file(s) deleted, "
        "2.0 KiB (2048 bytes) freed, 1 already gone, 1 refused by the guard, "
        "2 child task(s); lease exec-1 attempt 2; table ns.t"
    )
    failed = an_outcome(status=Status.DEAD).evolve(
        error="task POLARIS/7 'entityCleanup_1': guard refused 1 path(s)"
    )
    assert log_line(failed).endswith(f" dead: {failed.error}")
    assert OutcomeFacts(failed).cause == "guard refused 1 path(s)"


def test_progress_is_throttled_to_the_one_interval() -> None:
    now = [0.0]
    lines: list[str] = []
    sink = ProgressSink(lines.append, clock=lambda: now[0])
    sink(lease(7), 1, 4, "batch files")
    assert lines == []  # nothing in the first interval: the task's own line says it
    now[0] = PROGRESS_INTERVAL_S
    sink(lease(7), 2, 4, "batch files")
    assert sink.note("so far") is False  # the same throttle for notes
    now[0] = 2 * PROGRESS_INTERVAL_S
    assert sink.note("so far") is True
    assert lines == ["POLARIS/7: batch files 2/4 (50%)", "so far"]
    every: list[str] = []
    unthrottled = ProgressSink(every.append, interval_s=0)
    unthrottled(lease(7), 1, 0, "files")
    unthrottled(lease(7), 2, 0, "files")
    assert every == ["POLARIS/7: files 1", "POLARIS/7: files 2"]
    assert progress_text(lease(7), 3, 3, "x") == "POLARIS/7: x 3/3 (100%)"


def test_the_sensors_reason_names_the_realms_as_the_cli_does() -> None:
    counts = Counter({TaskState.PENDING: 2, TaskState.LEASED: 1, TaskState.ORPHANED: 1})
    reason = no_orphans_reason(counts, ["A"], wait_s=30)
    assert reason == (
        "no orphaned tasks in realms [A]; 2 pending within grace, 1 leased, 0 backing off, "
        "0 dead, 1 orphaned but taken by a concurrent sweeper; next sweep in 30 s"
    )
    assert no_orphans_reason(Counter(), None, wait_s=5, seen=["B", "A"]).startswith(
        "no orphaned tasks in realms [A, B]; 0 pending"
    )
    assert no_orphans_reason(Counter(), None, wait_s=5).startswith("no orphaned tasks in any realm")


def test_reading_outcomes_loads_no_cleanup_engine() -> None:
    """The run-report sensor reads totals: it must not load the runner or the cleanup code."""
    probe = (
        "import sys\n"
        "import polaris_pipeline.report.totals, polaris_pipeline.report.outcome_metadata\n"
        "import polaris_pipeline.report.outcome_json, polaris_pipeline.report.outcome_line\n"
        "import polaris_pipeline.report.progress, polaris_pipeline.report.nothing_available\n"
        "print(','.join(sorted(m for m in sys.modules if m == 'polaris_pipeline.execution.runner'"
        " or m.startswith('polaris_pipeline.cleanup'))) or 'none')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "none"
