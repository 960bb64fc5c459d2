"""The table roots the catalog recorded for a task: all a guard may be built on."""

from __future__ import annotations

from dataclasses import dataclass

from polaris_pipeline.storage.guard import ROOT_PROPERTIES
from polaris_pipeline.tasks.decoded import recorded_location
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import DroppedEntity


@dataclass(frozen=True)
class RecordedRoots:
    """The table roots the catalog recorded: what a guard may be built on.

    Never read from a file the guard is about to judge (a metadata file's own
    ``location``): such a file could be crafted, or be a live table's.
    """

    location: str
    source: str  # which record ``location`` came from, for messages
    # Root properties (write.data.path ...) the catalog recorded; never the metadata file's.
    properties: dict[str, str]


def recorded_roots(task: TaskRow, entity: DroppedEntity | None = None) -> RecordedRoots | None:
    """The task's recorded roots, or None when the catalog recorded no location.

    The location is the task's ``storageLocation``, else the dropped entity's
    ``properties["location"]`` (blank values count as absent). Root properties come
    from the entity's properties and the task's internal properties (the task's win:
    it is what the catalog handed the task).
    """
    internal = task.internal_properties
    found = recorded_location(task, entity)
    if found is None:
        return None
    location, source = found
    props = {
        key: value
        for source_props in (entity.properties if entity is not None else {}, internal)
        for key, value in source_props.items()
        if key in ROOT_PROPERTIES and value.strip()
    }
    return RecordedRoots(location, source, props)
