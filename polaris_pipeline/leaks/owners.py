"""Who still owns a table root: a live entity (Polaris's overlap rule) or a task.

Live: ``metastore/overlap.py`` over every realm and catalog (a table or view at, above or
under the root; a namespace or catalog at or under it). Tasks: any task of any state whose
recorded location (``recorded_roots``) is at, above or under the root may yet clean it:
the root is the sweeper's, not leaked.
"""

from __future__ import annotations

from collections.abc import Iterable

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore.overlap import LiveLocations, Overlap
from polaris_pipeline.storage.uri import Location, parse_location
from polaris_pipeline.tasks.model import TaskRow, TaskType
from polaris_pipeline.tasks.payloads import decode_dropped_entity
from polaris_pipeline.tasks.roots import recorded_roots


def task_location(task: TaskRow) -> Location | None:
    """The location ``task`` records for its table, if it records one that parses."""
    entity = None
    try:
        if task.task_type() is TaskType.ENTITY_CLEANUP_SCHEDULER:
            entity = decode_dropped_entity(task.data())
    except PolarisPipelineError:
        entity = None  # its storageLocation may still say where it works
    roots = recorded_roots(task, entity)
    if roots is None:
        return None
    try:
        return parse_location(roots.location, directory=True)
    except ValueError:
        return None


class RootOwners:
    """The ownership checks of one walk: the live entities, and the tasks read once."""

    def __init__(self, live: LiveLocations, tasks: Iterable[TaskRow]) -> None:
        self.live = live
        # Read once per report: tasks are few beside files, and a task created
        # during the walk is one Polaris is running now (reclaim checks again).
        self.task_locations = [loc for t in tasks if (loc := task_location(t)) is not None]

    def inside_live_table(self, directory: Location) -> Overlap | None:
        """The live table or view whose files ``directory`` is, if any: never descended."""
        return self.live.enclosing_table(directory)

    def live_owner(self, root: Location) -> Overlap | None:
        """A live entity overlapping ``root`` by Polaris's rule, if any."""
        found = self.live.overlaps(root, limit=1)
        return found[0] if found else None

    def live_writer(self, root: Location) -> Overlap | None:
        """A live table writing files at, above or under ``root`` by a write path."""
        found = self.live.write_path_users(root, limit=1)
        return found[0] if found else None

    def task_naming(self, root: Location) -> Location | None:
        """The location of a task at, above or under ``root``, if any."""
        for loc in self.task_locations:
            if loc.contains(root) or root.contains(loc):
                return loc
        return None
