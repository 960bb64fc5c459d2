"""What tasks did, added up: one total for a CLI sweep, a run, a backfill and the demo.

``OutcomeTotals`` adds the Runner's ``TaskOutcome``s, once (``of``), and is never
changed: totals add up with ``+``; ``RunningTotals`` remakes one per outcome of a sweep.
It is stored as a record with machine field names (``to_record``, read back by
``from_record``: a step's record, ``step_record.py``), and shown under the labels of
``fields.py`` (``metadata``), which nothing reads back. ``line`` and ``tasks_text`` are the
one wording of a total; ``format_counts`` the one wording of counts by status.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import (
    BY_STATUS,
    OUTCOME_FIELDS,
    RETAINED_SIZES_UNREPORTED,
    RETENTION_FIELDS,
    SIZES_UNREPORTED,
)
from polaris_pipeline.tasks.formatting import format_bytes, retention_text

if TYPE_CHECKING:
    from polaris_pipeline.cleanup.context import CleanupResult

_FAILED = (Status.FAILED.value, Status.DEAD.value)

# The numbers of a stored record (``to_record``), by their machine names: runs' event
# logs keep them, so a name here is never renamed (tests/test_step_record.py pins them).
RECORD_NUMBERS = (
    "files_deleted",
    "files_missing",
    "refused",
    "bytes_freed",
    "sizes_unreported",
    "files_retained",
    "bytes_retained",
    "retained_sizes_unreported",
    "retention_unknown",
    "children_created",
    "permanent",
)


def status_word(status: str) -> str:
    """``lease-lost`` as ``lease lost``: a status written in words."""
    return status.replace("-", " ")


def _order(status: str) -> tuple[int, str]:
    known = [s.value for s in Status]
    return (known.index(status), "") if status in known else (len(known), status)


def format_counts(counts: Mapping[str, int]) -> str:
    """``3 done, 1 failed``: the non-zero counts, the Runner's statuses first; ``none``."""
    parts = [
        f"{n} {status_word(s)}" for s, n in sorted(counts.items(), key=lambda i: _order(i[0])) if n
    ]
    return ", ".join(parts) or "none"


def retention_state(deleted: int, retained: int, unknown: int) -> str | None:
    """What became of deleted files' bytes: ``freed``, ``kept`` (versioning or soft
    delete), ``unknown`` (the store would not say), ``mixed``; None: nothing deleted."""
    if not deleted:
        return None
    freed = deleted - retained - unknown
    states = [s for s, n in (("freed", freed), ("kept", retained), ("unknown", unknown)) if n]
    return states[0] if len(states) == 1 else "mixed"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _counts(value: Any) -> Counter[str]:
    """Counts by status, as a record holds them; anything else counts nothing."""
    if not isinstance(value, Mapping):
        return Counter()
    return Counter({str(s): n for s, n in value.items() if _int(n) > 0})


def _result_numbers(result: CleanupResult | None) -> Counter[str]:
    """The numbers one cleanup result adds to a total, by their record names."""
    if result is None:
        return Counter()
    numbers = Counter(
        files_deleted=result.deleted,
        files_missing=result.missing,
        refused=len(result.refused),
        files_retained=result.retained,
        retention_unknown=result.retention_unknown,
    )
    if result.bytes_freed is None:
        numbers["sizes_unreported"] += 1
    else:
        numbers["bytes_freed"] += result.bytes_freed
    if result.bytes_retained is None:
        numbers["retained_sizes_unreported"] += 1
    else:
        numbers["bytes_retained"] += result.bytes_retained
    return numbers


@dataclass(frozen=True)
class OutcomeTotals:
    """Outcomes added up: the numbers, and the tasks and the child tasks by status.

    Made once (``of``, ``counted``, ``from_record``) and added with ``+``: never changed.
    """

    files_deleted: int = 0
    files_missing: int = 0
    refused: int = 0
    bytes_freed: int = 0
    sizes_unreported: int = 0
    # Deleted on a store that keeps deleted objects, or would not say (RETENTION_FIELDS).
    files_retained: int = 0
    bytes_retained: int = 0
    retained_sizes_unreported: int = 0
    retention_unknown: int = 0
    children_created: int = 0
    permanent: int = 0
    tasks: Counter[str] = field(default_factory=Counter)  # tasks by status
    children: Counter[str] = field(default_factory=Counter)  # child tasks by status

    @classmethod
    def of(cls, outcomes: Iterable[TaskOutcome], *, child: bool | None = None) -> OutcomeTotals:
        """``outcomes`` added up. ``child``: each counted as a child task; None: when an
        outcome before it created it (a sweep runs children after their parent)."""
        numbers: Counter[str] = Counter()
        by_status: dict[bool, Counter[str]] = {False: Counter(), True: Counter()}
        parents: set[tuple[str, int]] = set()
        for outcome in outcomes:
            lease = outcome.lease
            is_child = (lease.realm_id, lease.task_id) in parents if child is None else child
            by_status[is_child][outcome.status.value] += 1
            numbers.update(_result_numbers(outcome.result))
            numbers["permanent"] += int(outcome.permanent)
            numbers["children_created"] += len(outcome.children)
            parents.update((c.realm_id, c.task_id) for c in outcome.children)
        return cls(
            **{name: numbers[name] for name in RECORD_NUMBERS},
            tasks=by_status[False],
            children=by_status[True],
        )

    @classmethod
    def of_results(cls, results: Iterable[CleanupResult | None]) -> OutcomeTotals:
        """The numbers of ``results`` alone, no task counted."""
        numbers: Counter[str] = Counter()
        for result in results:
            numbers.update(_result_numbers(result))
        counts: dict[str, Any] = {name: numbers[name] for name in RECORD_NUMBERS}
        return cls(**counts)

    @classmethod
    def counted(cls, status: str, *, child: bool = False, count: int = 1) -> OutcomeTotals:
        """Tasks counted by status only (a child found already done has no outcome)."""
        counts = Counter({status: count}) if count else Counter()
        return cls(children=counts) if child else cls(tasks=counts)

    def __add__(self, other: OutcomeTotals) -> OutcomeTotals:
        return OutcomeTotals(
            **{name: getattr(self, name) + getattr(other, name) for name in RECORD_NUMBERS},
            tasks=self.tasks + other.tasks,
            children=self.children + other.children,
        )

    def as_children(self) -> OutcomeTotals:
        """These totals with their tasks counted as child tasks (a group's child, run as a
        task)."""
        return replace(self, tasks=Counter(), children=self.children + self.tasks)

    # -------------------------------------------------------------- the record

    def to_record(self) -> dict[str, Any]:
        """The numbers and counts as plain JSON under machine names: what is stored."""
        record: dict[str, Any] = {name: getattr(self, name) for name in RECORD_NUMBERS}
        record["tasks"] = {s: n for s, n in self.tasks.items() if n}
        record["children"] = {s: n for s, n in self.children.items() if n}
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> OutcomeTotals:
        """What ``to_record`` wrote; a number missing or not a count reads as 0."""
        return cls(
            **{name: max(_int(record.get(name)), 0) for name in RECORD_NUMBERS},
            tasks=_counts(record.get("tasks")),
            children=_counts(record.get("children")),
        )

    # -------------------------------------------------------------- reading

    @property
    def bytes_unknown(self) -> bool:
        """Some storage reported no sizes: ``bytes_freed`` is a lower bound."""
        return self.sizes_unreported > 0

    @property
    def children_total(self) -> int:
        return sum(self.children.values())

    @property
    def child_tasks(self) -> int:
        """Child tasks created or run here, whichever is more: a task's step creates
        them, a group step runs them, a sweep does both."""
        return max(self.children_created, self.children_total)

    @property
    def by_status(self) -> Counter[str]:
        """Tasks and child tasks together, by status."""
        return self.tasks + self.children

    @property
    def failed(self) -> int:
        """Tasks and child tasks that failed (backing off) or were dead-lettered."""
        every = self.by_status
        return sum(every[s] for s in _FAILED)

    # -------------------------------------------------------------- writing

    def metadata(self) -> dict[str, Any]:
        """The numbers under their display labels, in the order a step's page shows them:
        for the UI only (what is read back is ``to_record``)."""
        meta: dict[str, Any] = {f.label: getattr(self, f.attr) for f in OUTCOME_FIELDS}
        if self.children:
            meta[BY_STATUS] = {s: n for s, n in self.children.items() if n}
        if self.sizes_unreported:
            meta[SIZES_UNREPORTED] = self.sizes_unreported
        if self.files_retained or self.retention_unknown:  # absent on unversioned storage
            meta.update({f.label: getattr(self, f.attr) for f in RETENTION_FIELDS})
            if self.retained_sizes_unreported and self.files_retained:
                meta[RETAINED_SIZES_UNREPORTED] = self.retained_sizes_unreported
        return meta

    @property
    def bytes_retained_known(self) -> int | None:
        """Bytes kept by versioning; None when storage did not report their sizes."""
        return None if self.retained_sizes_unreported else self.bytes_retained

    def retention_text(self) -> str:
        """Deleted files whose bytes were not freed, in words; empty when none."""
        return retention_text(
            self.files_retained, self.bytes_retained_known, self.retention_unknown
        )

    def line(self) -> str:
        """The one line of a total, for the CLI, a run's tag, a log, an alert, the demo."""
        freed = format_bytes(self.bytes_freed) + (" or more" if self.bytes_unknown else "")
        # Bytes a store keeps are never called freed; "freed" only for what was.
        not_freed = self.files_retained + self.retention_unknown
        bytes_part = f", {freed} freed" if not not_freed or self.files_deleted > not_freed else ""
        kept = f"; {self.retention_text()}" if not_freed else ""
        return (
            f"{self.files_deleted} file(s) deleted, {self.files_missing} already gone, "
            f"{self.refused} refused{bytes_part}{kept}; "
            f"children: {format_counts(self.children)}"
        )

    def tasks_text(self) -> str:
        """``4 task(s): 3 done, 1 dead``: every task, children included, by status
        (``line`` says how the children ended)."""
        every = self.by_status
        return f"{sum(every.values())} task(s): {format_counts(every)}"


class RunningTotals:
    """Outcomes told one at a time (a CLI sweep, a realm backfill): the total so far,
    remade frozen after each, and the parent of each child task seen."""

    def __init__(self) -> None:
        self.totals = OutcomeTotals()
        self._parents: dict[tuple[str, int], int] = {}

    def add(self, outcome: TaskOutcome) -> int | None:
        """Adds ``outcome``; returns the id of the task (added before) that created it,
        None for a root."""
        lease = outcome.lease
        parent = self.parent_of(lease.realm_id, lease.task_id)
        self.totals += OutcomeTotals.of([outcome], child=parent is not None)
        for created in outcome.children:
            self._parents[(created.realm_id, created.task_id)] = lease.task_id
        return parent

    def parent_of(self, realm_id: str, task_id: int) -> int | None:
        """The id of the task (added here) that created this one; None for a root."""
        return self._parents.get((realm_id, task_id))
