"""Which available tasks are the orphaned children of one table's purge, to run together.

Polaris's TableCleanupTaskHandler (and ``tasks.payloads``) names children
``<parent task name>_<manifest or file list>_<uuid>`` with the table's ``tableId``. When
the parent row is gone they are orphans of one purge: one run for them all. A child whose
parent still exists (its holder may still be creating children), a lone orphan, or a
task that does not parse stays a run of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.tasks.hold import parent_name_of
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import decode_child_table_id


@dataclass(frozen=True)
class CandidateRun:
    """One run to request: a single task, or the orphaned children of one purge."""

    tasks: tuple[TaskRow, ...]
    parent_name: str | None = None  # set for a group of orphans

    @property
    def first(self) -> TaskRow:
        return self.tasks[0]


def orphan_key(task: TaskRow) -> tuple[str, str, str] | None:
    """(realm, parent task name, table) of a cleanup child, or None for anything else."""
    # A child's name is ``<parent>_<what>_<uuid>``, the parent a table cleanup (as the
    # hold reads it): anything not shaped so is not taken for a child.
    parent = parent_name_of(task)
    if parent is None:
        return None
    try:
        table = decode_child_table_id(task.data())
    except PayloadError:
        return None
    return task.realm_id, parent, json.dumps(table.to_json_obj(), sort_keys=True)


def group_candidates(
    tasks: Sequence[TaskRow],
    parents_present: Callable[[str, Iterable[str]], set[str]],
) -> list[CandidateRun]:
    """``tasks`` as runs, in their order: orphans of one purge together, the rest alone.

    ``parents_present(realm, names)`` says which parent task rows still exist
    (``Metastore.task_names_present``); their children are not grouped.
    """
    keyed: dict[tuple[str, str, str], list[TaskRow]] = {}
    for task in tasks:
        key = orphan_key(task)
        if key is not None:
            keyed.setdefault(key, []).append(task)
    candidates = {key for key, members in keyed.items() if len(members) > 1}
    by_realm: dict[str, set[str]] = {}
    for realm, parent, _ in candidates:
        by_realm.setdefault(realm, set()).add(parent)
    alive = {
        (realm, name) for realm, names in by_realm.items() for name in parents_present(realm, names)
    }
    grouped = {key for key in candidates if (key[0], key[1]) not in alive}
    runs: list[CandidateRun] = []
    emitted: set[tuple[str, str, str]] = set()
    for task in tasks:
        key = orphan_key(task) if grouped else None
        if key is None or key not in grouped:
            runs.append(CandidateRun((task,)))
        elif key not in emitted:
            emitted.add(key)
            runs.append(CandidateRun(tuple(keyed[key]), parent_name=key[1]))
    return runs
