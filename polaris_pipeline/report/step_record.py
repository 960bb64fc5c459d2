"""What one step of a task run did, as one structured entry: what the run report reads.

Every step of the task job that runs a task (or a group of child tasks) writes a
``StepRecord`` under ``STEP_RECORD_KEY``: its ``OutcomeTotals`` under machine
field names (``OutcomeTotals.to_record``) and its table's unreferenced report. The
run report, the alerts and the demo add a run up from these (``read_step``). The
labels beside them (``fields.py``) are derived from the same totals for the UI and
are never read back: renaming one changes no total.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from polaris_pipeline.execution.outcome import Status
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.unreferenced.report import UnreferencedReport

# The step metadata entry holding the record (a JSON value). Stored in runs' event
# logs: never renamed.
STEP_RECORD_KEY = "polaris/step"
# Written into each record; a later change of its fields says so here.
RECORD_VERSION = 2


@dataclass(frozen=True)
class StepRecord:
    """One step's totals, and its table's unreferenced phase (None: none ran)."""

    totals: OutcomeTotals = field(default_factory=OutcomeTotals)
    unreferenced: UnreferencedReport | None = None

    def to_json(self) -> dict[str, Any]:
        unreferenced = self.unreferenced
        return {
            "version": RECORD_VERSION,
            "totals": self.totals.to_record(),
            "unreferenced": unreferenced.to_record() if unreferenced is not None else None,
        }

    @classmethod
    def from_json(cls, value: object) -> StepRecord | None:
        """The record ``to_json`` wrote; None for anything else."""
        if not isinstance(value, Mapping) or not isinstance(value.get("version"), int):
            return None
        totals = value.get("totals")
        return cls(
            OutcomeTotals.from_record(totals if isinstance(totals, Mapping) else {}),
            UnreferencedReport.from_record(value.get("unreferenced")),
        )


def read_step(metadata: Mapping[str, Any], *, failed: bool = False) -> StepRecord:
    """One step's record from its metadata (plain values); ``failed``: the step failed.

    A step without a record counts nothing. A failed step whose record counts no task
    (it failed before running one: an operator's run that could not start its task,
    an unexpected error) counts as one failed task.
    """
    record = StepRecord.from_json(metadata.get(STEP_RECORD_KEY)) or StepRecord()
    counted = record.totals.tasks.total() + record.totals.children.total()
    if failed and not counted:
        return replace(record, totals=record.totals + OutcomeTotals.counted(Status.FAILED.value))
    return record
