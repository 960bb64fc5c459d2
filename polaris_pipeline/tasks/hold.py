"""The hold: a dropped table's purge waits N days after the drop (per realm or catalog).

A hold keeps the table restorable (``restore/``) for its window: its parent task
(ENTITY_CLEANUP_SCHEDULER) is not leased until ``drop time + hold``, and neither
is any child of it (MANIFEST/BATCH rows a Polaris attempt created before failing):
purging a child would delete files the held table still names.

The drop time is the parent task's ``create_timestamp``: Polaris writes the task
in the drop's own call (``DROP_TIME_SOURCE`` says so in the output). A child is
held while its parent row exists and is within its window. A hold never outranks
the dead-letter rule (``TaskRow.state``). The same rule is SQL in
``metastore.predicates.held``; ``tests/test_hold.py`` holds the two in agreement.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from polaris_pipeline.tasks.model import (
    CATALOG_ID_DATA_PATTERN,
    CHILD_NAME_PATTERN,
    INTEGER_PATTERN,
    Prop,
    TaskPolicy,
    TaskRow,
    TaskType,
)

DROP_TIME_SOURCE = "the task's creation (Polaris writes it in the drop)"
PARENT_TASK_TYPE = TaskType.ENTITY_CLEANUP_SCHEDULER.code
CHILD_TASK_TYPES = (TaskType.MANIFEST_FILE_CLEANUP.code, TaskType.BATCH_FILE_CLEANUP.code)

_CATALOG_ID = re.compile(CATALOG_ID_DATA_PATTERN)
_CHILD_NAME = re.compile(CHILD_NAME_PATTERN, re.DOTALL)
_INTEGER = re.compile(INTEGER_PATTERN)


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
class HoldView:
    """What the hold rule needs beyond a row: catalog names and the child tasks' parents.

    ``catalogs``: (realm, catalog id) -> catalog name. ``parents``: (realm, task
    name) -> the parent task rows the children name (absent: no such row).
    """

    policy: TaskPolicy
    catalogs: Mapping[tuple[str, int], str] = field(default_factory=dict)
    parents: Mapping[tuple[str, str], TaskRow] = field(default_factory=dict)

    def hold_ms(self, task: TaskRow) -> int:
        """The hold of a parent task: its catalog's, else its realm's (0 for other tasks)."""
        if task.task_type_code != PARENT_TASK_TYPE or task.properties_error:
            return 0
        catalog_id = catalog_id_of(task)
        name = None if catalog_id is None else self.catalogs.get((task.realm_id, catalog_id))
        return self.policy.hold_ms_for(task.realm_id, name)

    def held_until_ms(self, task: TaskRow) -> int | None:
        """When ``task``'s hold ends (epoch ms); None: it has none."""
        parent_name = parent_name_of(task)
        if parent_name is not None:
            parent = self.parents.get((task.realm_id, parent_name))
            return None if parent is None else self.held_until_ms(parent)
        hold = self.hold_ms(task)
        return task.create_timestamp + hold if hold > 0 else None

    def with_hold(self, task: TaskRow) -> TaskRow:
        """``task`` carrying its hold's end (``TaskRow.held_until_ms``)."""
        return dataclasses.replace(task, held_until_ms=self.held_until_ms(task))

    def catalog_name(self, task: TaskRow) -> str | None:
        catalog_id = catalog_id_of(task)
        return None if catalog_id is None else self.catalogs.get((task.realm_id, catalog_id))


def parent_names(tasks: Iterable[TaskRow]) -> dict[str, set[str]]:
    """Realm -> the parent task names ``tasks``' children name."""
    out: dict[str, set[str]] = {}
    for task in tasks:
        name = parent_name_of(task)
        if name is not None:
            out.setdefault(task.realm_id, set()).add(name)
    return out
