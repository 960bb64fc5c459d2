"""The backlog's numbers, from one read of the metastore.

One ``count_by_state`` gives every realm's tasks by state; the task rows are read
(once, only for the realms that have them) when the counts show orphaned,
backing-off or dead tasks: the longest wait, the stale orphans and the samples
need them (``checks``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dagster import AssetKey, MetadataValue

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.formatting import purges_after
from polaris_pipeline.tasks.model import DropTimeSource, TaskRow, TaskState
from polaris_pipeline.tasks.summary import orphaned_since_ms

ASSET_NAME = "polaris_task_backlog"
ASSET_KEY = AssetKey(ASSET_NAME)
# Metadata keys of the asset: one per state (the TaskState values), then these;
# each also prefixed by a realm (``realm_key``).
TOTAL_KEY = "total"
OLDEST_ORPHAN_KEY = "oldest orphan age (s)"
# How long ago the oldest held drop was dropped (its purge on hold, ``tasks/hold.py``).
OLDEST_HELD_KEY = "oldest held drop age (s)"


def held_from_key(source: DropTimeSource) -> str:
    """The metadata key of how many held tasks count their hold from ``source``."""
    return f"held, drop time from {source.value}"


# States whose rows the report reads: the checks list them, the orphans' waits need them,
# and the held ones' age.
_DETAILED = (TaskState.ORPHANED, TaskState.BACKING_OFF, TaskState.DEAD, TaskState.HELD)


def realm_key(realm: str, key: str) -> str:
    """The metadata key of one realm's number: ``POLARIS/orphaned``."""
    return f"{realm}/{key}"


@dataclass(frozen=True)
class Orphan:
    task: TaskRow
    waited_s: float


@dataclass(frozen=True)
class RealmBacklog:
    """One realm's tasks by state, and its orphans, longest-waiting first."""

    realm: str
    counts: Counter[TaskState]
    orphans: list[Orphan]
    oldest_held_s: float = 0.0
    first_purge_ms: int | None = None  # when the first held task's hold ends
    # How many held tasks count their hold from each drop time source.
    held_from: Counter[DropTimeSource] = field(default_factory=Counter)

    @property
    def oldest_orphan_age_s(self) -> float:
        return self.orphans[0].waited_s if self.orphans else 0.0


@dataclass(frozen=True)
class BacklogReport:
    """Every realm's backlog, and the rows of its orphaned, backing-off and dead tasks."""

    realms: list[str]
    backlogs: list[RealmBacklog]
    rows: list[tuple[TaskRow, TaskState]]

    def tasks(self, state: TaskState) -> list[TaskRow]:
        return [task for task, s in self.rows if s is state]


def read_report(
    store: Metastore,
    realms: Sequence[str] | None,
    counts: Mapping[str, Counter[TaskState]] | None = None,
) -> BacklogReport:
    """The report of ``realms`` (None: every realm with tasks).

    ``counts``: the ``count_by_state(realms)`` the caller already made, if it did.
    """
    per_realm = store.count_by_state(realms) if counts is None else counts
    realms = list(realms) if realms is not None else sorted(per_realm)
    detailed = [r for r in realms if any(per_realm.get(r, Counter())[s] for s in _DETAILED)]
    rows: list[tuple[TaskRow, TaskState]] = []
    now = 0
    if detailed:
        now, every = store.tasks_with_state(detailed)
        rows = [(task, state) for task, state in every if state in _DETAILED]
    backlogs = []
    for realm in realms:
        orphans = [
            Orphan(task, max(0.0, (now - orphaned_since_ms(task, store.policy)) / 1000))
            for task, state in rows
            if state is TaskState.ORPHANED and task.realm_id == realm
        ]
        orphans.sort(key=lambda o: o.waited_s, reverse=True)
        held = [t for t, s in rows if s is TaskState.HELD and t.realm_id == realm]
        dropped = [t.dropped_at_ms for t in held if t.dropped_at_ms is not None]
        oldest_held = max(((now - ms) / 1000 for ms in dropped), default=0.0)
        ends = [t.held_until_ms for t in held if t.held_until_ms is not None]
        backlogs.append(
            RealmBacklog(
                realm,
                Counter(per_realm.get(realm, Counter())),
                orphans,
                max(0.0, oldest_held),
                min(ends, default=None),
                Counter(t.drop_time_source for t in held if t.drop_time_source is not None),
            )
        )
    return BacklogReport(list(realms), backlogs, rows)


def backlog_metadata(backlogs: Iterable[RealmBacklog]) -> dict[str, MetadataValue]:
    """Numbers only, so that the UI plots each of them over time: all realms, then each."""
    listed = list(backlogs)
    overall = sum((backlog.counts for backlog in listed), Counter[TaskState]())
    meta: dict[str, MetadataValue] = {s.value: MetadataValue.int(overall[s]) for s in TaskState}
    meta[TOTAL_KEY] = MetadataValue.int(sum(overall.values()))
    oldest = max((b.oldest_orphan_age_s for b in listed), default=0.0)
    meta[OLDEST_ORPHAN_KEY] = MetadataValue.float(round(oldest, 3))
    meta[OLDEST_HELD_KEY] = MetadataValue.float(
        round(max((b.oldest_held_s for b in listed), default=0.0), 3)
    )
    for source in DropTimeSource:
        meta[held_from_key(source)] = MetadataValue.int(sum(b.held_from[source] for b in listed))
    for backlog in listed:
        for state in TaskState:
            meta[realm_key(backlog.realm, state.value)] = MetadataValue.int(backlog.counts[state])
        meta[realm_key(backlog.realm, TOTAL_KEY)] = MetadataValue.int(sum(backlog.counts.values()))
        meta[realm_key(backlog.realm, OLDEST_ORPHAN_KEY)] = MetadataValue.float(
            round(backlog.oldest_orphan_age_s, 3)
        )
    return meta


def backlog_lines(report: BacklogReport) -> list[str]:
    """One line per realm, for a log: ``realm A: 2 pending, ...; oldest orphan waiting 9 s``."""
    lines = []
    for backlog in report.backlogs:
        counts = ", ".join(f"{backlog.counts[s]} {s.value}" for s in TaskState)
        held = ""
        if backlog.counts[TaskState.HELD]:
            sources = ", ".join(
                f"{n} from the {source.value}" for source, n in sorted(backlog.held_from.items())
            )
            held = (
                f"; oldest held drop {backlog.oldest_held_s:.0f} s ago, the first "
                f"{purges_after(backlog.first_purge_ms)} (drop time: {sources})"
            )
        lines.append(
            f"realm {backlog.realm}: {counts}; "
            f"oldest orphan waiting {backlog.oldest_orphan_age_s:.0f} s{held}"
        )
    return lines or ["no realm has tasks"]
