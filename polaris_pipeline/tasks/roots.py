"""The table roots the catalog recorded for a task: all a guard may be built on.

Never read from a file the guard is about to judge (a metadata file's own
``location``): such a file could be crafted, or be a live table's. A decoded task
carries its roots (``DecodedTask.roots``), computed once from its row and entity.
"""

from __future__ import annotations

from dataclasses import dataclass

from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import DroppedEntity

# Where Polaris records the table's location on each of its tasks.
STORAGE_LOCATION_KEY = "storageLocation"
# Where Polaris records a table's (or view's) base location on the entity itself.
ENTITY_LOCATION_KEY = "location"
# Table properties that place files outside the table location (the guard admits
# deletes under them; the live-entity checks of ``metastore/overlap.py`` read the same
# list). The last two are the older names Iceberg still honours.
ROOT_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)


@dataclass(frozen=True)
class RecordedRoots:
    """The table roots the catalog recorded: what a guard may be built on."""

    location: str
    source: str  # which record ``location`` came from, for messages
    # Root properties (write.data.path ...) the catalog recorded; never the metadata file's.
    properties: dict[str, str]


def recorded_location(task: TaskRow, entity: DroppedEntity | None) -> tuple[str, str] | None:
    """The table location the catalog recorded and its source (for messages), or None: the
    task's ``storageLocation``, else the dropped entity's ``location``; blanks count as absent.
    """
    location = task.internal_properties.get(STORAGE_LOCATION_KEY, "")
    if location.strip():
        return location, "the task's storageLocation"
    location = entity.properties.get(ENTITY_LOCATION_KEY, "") if entity is not None else ""
    if location.strip():
        return location, "the dropped entity's location property"
    return None


def recorded_roots(task: TaskRow, entity: DroppedEntity | None = None) -> RecordedRoots | None:
    """The task's recorded roots, or None when the catalog recorded no location.

    ``recorded_location``'s location plus the root properties of the entity and the task's
    internal properties (the task's win: it is what the catalog handed the task).
    """
    found = recorded_location(task, entity)
    if found is None:
        return None
    location, source = found
    props = {
        key: value
        for source_props in (
            entity.properties if entity is not None else {},
            task.internal_properties,
        )
        for key, value in source_props.items()
        if key in ROOT_PROPERTIES and value.strip()
    }
    return RecordedRoots(location, source, props)
