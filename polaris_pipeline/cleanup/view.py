"""Cleanup of a dropped view: only its current metadata file is deleted (as Polaris does).

The guard is built on what the catalog recorded (the task's ``storageLocation``,
else the dropped entity's ``location``) and judges the metadata file before it is
read. The file is deleted only when it is view metadata (it has a ``view-uuid``)
whose ``location`` is that recorded root: a task pointing at a table's metadata
file, or at a file declaring another location, is refused.
"""

from __future__ import annotations

import json

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.deleting import (
    delete_leftover_sidecars,
    delete_one,
    existing_with_sizes,
)
from polaris_pipeline.cleanup.guard.task import Guard
from polaris_pipeline.errors import GuardRefusal, StorageError
from polaris_pipeline.tasks.payloads import (
    DroppedEntity,
    require_metadata_location,
)

# Iceberg's view metadata always has it; table metadata has "table-uuid" instead.
_VIEW_UUID_KEY = "view-uuid"


def _read_view_metadata(ctx: CleanupContext, metadata_uri: str) -> object | None:
    """The JSON document at ``metadata_uri``, or None when the file is gone."""
    try:
        with ctx.resolver.input_file(metadata_uri).open() as stream:
            return json.loads(stream.read())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise StorageError(f"view metadata {metadata_uri} is not JSON: {e}") from None


def run_view_cleanup(ctx: CleanupContext, entity: DroppedEntity | None = None) -> CleanupTally:
    """Delete the dropped view's metadata file, guarded; a missing file is done."""
    if entity is None:
        entity = ctx.decoded.require(DroppedEntity)
    metadata_uri = require_metadata_location(entity)
    result = CleanupTally.start()
    guard = Guard.for_task(ctx)
    if not guard.admit(metadata_uri, result):
        result.notes.append("view metadata file refused by the guard: nothing read or deleted")
        return result
    present = existing_with_sizes(ctx, result, [metadata_uri])
    if result.failed:
        return result
    if not present:
        delete_leftover_sidecars(ctx, result, guard, [metadata_uri])
        result.notes.append("view metadata file already gone: nothing to do")
        return result
    doc = _read_view_metadata(ctx, metadata_uri)
    if doc is None:
        result.notes.append("view metadata file already gone: nothing to do")
        return result
    if not isinstance(doc, dict) or _VIEW_UUID_KEY not in doc:
        result.refused.append(
            GuardRefusal(metadata_uri, "is not Iceberg view metadata (no view-uuid)")
        )
        return result
    if not guard.admit_declared_location(metadata_uri, doc.get("location"), result):
        result.notes.append("view metadata's location is not the recorded one: nothing deleted")
        return result
    return delete_one(ctx, result, guard, metadata_uri, present)
