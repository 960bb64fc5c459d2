"""The hold: a dropped table's purge waits N days after the drop (per realm or catalog).

A hold keeps the table restorable (``restore/``): its ENTITY_CLEANUP_SCHEDULER task is not
leased until ``drop time + hold``, nor any child of it (MANIFEST/BATCH rows a Polaris
attempt created): purging a child would delete files the held table still names.

The drop time is the earliest AFTER_DROP_TABLE (AFTER_DROP_VIEW) event of the task's realm,
catalog and identifier no earlier than ``DROP_EVENT_SLACK_MS`` before the task, where the
release writes one (1.6+, listener on; ``leaks/drops.py``); else the task's
``create_timestamp`` (Polaris writes it in the drop's own call). ``DropTimeSource`` says
which. A child is held while its parent row exists and is held. A hold never outranks the
dead-letter rule. The SQL twin is ``metastore.predicates.held`` (``tests/test_hold.py``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from polaris_pipeline.tasks.model import (
    CATALOG_ID_DATA_PATTERN,
    CHILD_NAME_PATTERN,
    DROP_EVENT_BY_SUB_TYPE,
    DROP_KEYS,
    DROP_NAME_DATA_PATTERN,
    DROP_NAMESPACE_DATA_PATTERN,
    DROP_SUB_TYPE_DATA_PATTERN,
    INTEGER_PATTERN,
    NAMESPACE_LEVEL_SEPARATOR,
    DropTimeSource,
    Prop,
    TaskPolicy,
    TaskRow,
    TaskType,
)

# Polaris makes the task, then the event, in one call on one clock: an event
# from before the task is another drop of that name, unless the clock stepped back.
DROP_EVENT_SLACK_MS = 10_000
# The rule in words, for output that has counts and no rows (the sensor's line).
DROP_TIME_RULE = (
    f"drop time: Polaris's drop event where it wrote one ({DropTimeSource.DROP_EVENT.value}), "
    f"else the task's creation ({DropTimeSource.TASK_CREATION.value})"
)
K = TypeVar("K")
PARENT_TASK_TYPE = TaskType.ENTITY_CLEANUP_SCHEDULER.code
CHILD_TASK_TYPES = (TaskType.MANIFEST_FILE_CLEANUP.code, TaskType.BATCH_FILE_CLEANUP.code)

_CATALOG_ID = re.compile(CATALOG_ID_DATA_PATTERN)
_CHILD_NAME = re.compile(CHILD_NAME_PATTERN, re.DOTALL)
_INTEGER = re.compile(INTEGER_PATTERN)
_DROP_SUB_TYPE = re.compile(DROP_SUB_TYPE_DATA_PATTERN)
_DROP_NAME = re.compile(DROP_NAME_DATA_PATTERN)
_DROP_NAMESPACE = re.compile(DROP_NAMESPACE_DATA_PATTERN)


def catalog_id_of(task: TaskRow) -> int | None:
    """The catalogId of the entity a parent task drops, read as the SQL rule reads it."""
    if task.task_type_code != PARENT_TASK_TYPE or task.properties_error:
        return None
    match = _CATALOG_ID.match(task.properties.get(Prop.DATA) or "")
    if match is None or not _INTEGER.fullmatch(match.group(1)):
        return None
    return int(match.group(1))


def parent_name_of(task: TaskRow) -> str | None:
    """The parent task's name of a child (MANIFEST or BATCH) task; None for anything else."""
    if task.task_type_code not in CHILD_TASK_TYPES or task.properties_error:
        return None
    match = _CHILD_NAME.fullmatch(task.name)
    return match.group(1) if match else None


@dataclass(frozen=True)
class DropKey:
    """What a parent task's drop event has: its type and ``resource_identifier``."""

    event_type: str
    identifier: str  # the namespace levels and the name joined by "."


def drop_key_of(task: TaskRow) -> DropKey | None:
    """The drop event a parent task's entity would have, read as the SQL rule reads it."""
    if task.task_type_code != PARENT_TASK_TYPE or task.properties_error:
        return None
    data = task.properties.get(Prop.DATA) or ""
    if any(data.count(key) > 1 for key in DROP_KEYS):
        return None
    sub_type, name, namespace = (
        p.match(data) for p in (_DROP_SUB_TYPE, _DROP_NAME, _DROP_NAMESPACE)
    )
    if sub_type is None or name is None or namespace is None:
        return None
    event_type = DROP_EVENT_BY_SUB_TYPE.get(sub_type.group(1))
    if event_type is None:
        return None
    levels = namespace.group(1).replace("+", " ").replace(NAMESPACE_LEVEL_SEPARATOR, ".")
    return DropKey(event_type, f"{levels}.{name.group(1)}" if levels else name.group(1))


# (realm, catalog name, event type, resource identifier) -> the events' timestamp_ms.
DropEventTimes = Mapping[tuple[str, str, str, str], Sequence[int]]


@dataclass(frozen=True)
class Hold:
    """A task's hold: when it ends, and the drop time it counts from (and its source)."""

    until_ms: int
    dropped_at_ms: int
    source: DropTimeSource


@dataclass(frozen=True)
class HoldView:
    """What the hold rule needs beyond a row: catalog names and the child tasks' parents.

    ``catalogs``: (realm, catalog id) -> catalog name. ``parents``: (realm, task
    name) -> the parent task rows the children name (absent: no such row).
    ``drop_events``: the drop events of the parents (empty without an events table).
    """

    policy: TaskPolicy
    catalogs: Mapping[tuple[str, int], str] = field(default_factory=dict)
    parents: Mapping[tuple[str, str], TaskRow] = field(default_factory=dict)
    drop_events: DropEventTimes = field(default_factory=dict)

    def hold_ms(self, task: TaskRow) -> int:
        """The hold of a parent task: its catalog's, else its realm's (0 for other tasks)."""
        if task.task_type_code != PARENT_TASK_TYPE or task.properties_error:
            return 0
        return self.policy.hold_ms_for(task.realm_id, self.catalog_name(task))

    def drop_time(self, task: TaskRow) -> tuple[int, DropTimeSource]:
        """A parent task's drop time: its earliest drop event from ``DROP_EVENT_SLACK_MS``
        before the task on, else the task's creation."""
        key, catalog = drop_key_of(task), self.catalog_name(task)
        if key is not None and catalog is not None:
            times = self.drop_events.get((task.realm_id, catalog, key.event_type, key.identifier))
            since = task.create_timestamp - DROP_EVENT_SLACK_MS
            found = [t for t in times or () if t >= since]
            if found:
                return min(found), DropTimeSource.DROP_EVENT
        return task.create_timestamp, DropTimeSource.TASK_CREATION

    def hold(self, task: TaskRow) -> Hold | None:
        """``task``'s hold (a child's is its parent's); None: it has none."""
        parent_name = parent_name_of(task)
        if parent_name is not None:
            parent = self.parents.get((task.realm_id, parent_name))
            return None if parent is None else self.hold(parent)
        hold = self.hold_ms(task)
        if hold <= 0:
            return None
        dropped, source = self.drop_time(task)
        return Hold(dropped + hold, dropped, source)

    def held_until_ms(self, task: TaskRow) -> int | None:
        """When ``task``'s hold ends (epoch ms); None: it has none."""
        hold = self.hold(task)
        return None if hold is None else hold.until_ms

    def with_hold(self, task: TaskRow) -> TaskRow:
        """``task`` carrying its hold (``TaskRow.held_until_ms`` and its drop time)."""
        hold = self.hold(task)
        until, dropped, source = (
            (None, None, None) if hold is None else (hold.until_ms, hold.dropped_at_ms, hold.source)
        )
        return dataclasses.replace(
            task, held_until_ms=until, dropped_at_ms=dropped, drop_time_source=source
        )

    def catalog_name(self, task: TaskRow) -> str | None:
        """The name of the catalog a parent task drops from; None: unknown."""
        catalog_id = catalog_id_of(task)
        return None if catalog_id is None else self.catalogs.get((task.realm_id, catalog_id))


def _by_realm(tasks: Iterable[TaskRow], key_of: Callable[[TaskRow], K | None]) -> dict[str, set[K]]:
    """Realm -> the keys ``key_of`` gives ``tasks`` (None: none)."""
    out: dict[str, set[K]] = {}
    for task in tasks:
        key = key_of(task)
        if key is not None:
            out.setdefault(task.realm_id, set()).add(key)
    return out


def drop_keys(tasks: Iterable[TaskRow]) -> dict[str, set[DropKey]]:
    """Realm -> the drop events ``tasks``' parent tasks would have."""
    return _by_realm(tasks, drop_key_of)


def parent_names(tasks: Iterable[TaskRow]) -> dict[str, set[str]]:
    """Realm -> the parent task names ``tasks``' children name."""
    return _by_realm(tasks, parent_name_of)
