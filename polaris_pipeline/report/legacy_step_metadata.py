"""Steps written by release 0.1.0, whose numbers are only under display labels.

That release stored a step's numbers as its display labels, and the run report
parsed them back. This reader keeps its runs totalling right; nothing else reads
a label. Its labels are spelled out here, as that release wrote them, so that
renaming a display label (``fields.py``) never changes what it reads.

Remove this module (and its call in ``step_record.read_step``) in the release
after the one that introduced ``STEP_RECORD_KEY``: by then every run of 0.1.0 has
ended and been reported (the report sensor reads a run once, minutes after it ends).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polaris_pipeline.execution.outcome import Status
from polaris_pipeline.report.totals import OutcomeTotals

# Each number's label in 0.1.0 -> its OutcomeTotals attribute.
_NUMBERS = {
    "files deleted": "files_deleted",
    "files already gone": "files_missing",
    "bytes freed": "bytes_freed",
    "refused paths": "refused",
    "tasks without sizes": "sizes_unreported",
    "files kept by versioning": "files_retained",
    "bytes kept by versioning": "bytes_retained",
    "tasks without sizes of kept files": "retained_sizes_unreported",
    "files kept or freed: unknown": "retention_unknown",
}
_STATUS = "status"  # a step that ran one task
_CHILD_TASKS = "child tasks"  # the children that task created
_PERMANENT = "permanent"
_BY_STATUS = "by status"  # a group step: its child tasks by status
_FAILED_CHILDREN = "failed child tasks"  # a failed group step
_CHILDREN_DONE = "child tasks done"
_UNREFERENCED = "unreferenced"  # the line of the table's unreferenced phase
_KEYS = {*_NUMBERS, _STATUS, _BY_STATUS, _FAILED_CHILDREN, _UNREFERENCED}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def legacy_step_totals(metadata: Mapping[str, Any]) -> tuple[OutcomeTotals, str | None] | None:
    """The totals and unreferenced line of a step 0.1.0 wrote (plain values); None: not
    one of its steps."""
    if not _KEYS & metadata.keys():
        return None
    totals = OutcomeTotals()
    for label, attr in _NUMBERS.items():
        setattr(totals, attr, _int(metadata.get(label)))
    # Before "tasks without sizes", bytes freed was the word "unknown".
    freed = metadata.get("bytes freed")
    if freed is not None and not isinstance(freed, int) and "tasks without sizes" not in metadata:
        totals.sizes_unreported += 1
    totals.permanent = int(metadata.get(_PERMANENT) is True)
    by_status = metadata.get(_BY_STATUS)
    if isinstance(by_status, Mapping):
        for status, count in by_status.items():
            totals.add_status(str(status), child=True, count=_int(count))
    elif _FAILED_CHILDREN in metadata:
        # The first failed child's metadata came along: its status is not the step's.
        totals.add_status(Status.DONE.value, child=True, count=_int(metadata.get(_CHILDREN_DONE)))
    elif _STATUS in metadata:
        totals.add_status(str(metadata[_STATUS]))
        totals.children_created = _int(metadata.get(_CHILD_TASKS))
    failed = _int(metadata.get(_FAILED_CHILDREN))
    totals.add_status(Status.FAILED.value, child=True, count=failed)
    line = metadata.get(_UNREFERENCED)
    return totals, line if isinstance(line, str) else None
