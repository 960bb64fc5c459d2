"""Cleanup of a dropped view: only its current metadata file is deleted (as Polaris does)."""

from __future__ import annotations

import json

from polaris_pipeline.cleanup.common import STORAGE_LOCATION_KEY, Guard, existing_with_sizes, tally
from polaris_pipeline.cleanup.context import CleanupContext, CleanupResult
from polaris_pipeline.errors import StorageError
from polaris_pipeline.storage.delete import bulk_delete
from polaris_pipeline.tasks.payloads import (
    DroppedEntity,
    decode_dropped_entity,
    require_metadata_location,
)


def _view_location(ctx: CleanupContext, metadata_uri: str) -> str | None:
    """The ``location`` the view metadata declares (only read without storageLocation)."""
    try:
        with ctx.resolver.input_file(metadata_uri).open() as stream:
            doc = json.loads(stream.read())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise StorageError(f"view metadata {metadata_uri} is not JSON: {e}") from None
    location = doc.get("location") if isinstance(doc, dict) else None
    return location if isinstance(location, str) and location else None


def run_view_cleanup(ctx: CleanupContext, entity: DroppedEntity | None = None) -> CleanupResult:
    """Delete the dropped view's metadata file, guarded; a missing file is done."""
    if entity is None:
        entity = decode_dropped_entity(ctx.task.data())
    metadata_uri = require_metadata_location(entity)
    result = CleanupResult()
    props = {**entity.properties, **ctx.task.internal_properties}
    fallback = None
    if not ctx.task.internal_properties.get(STORAGE_LOCATION_KEY):
        fallback = _view_location(ctx, metadata_uri)
    guard = Guard.build(ctx, props, fallback)
    if not guard.admit(metadata_uri, result):
        return result
    present = existing_with_sizes(ctx, result, [metadata_uri])
    if result.failed:
        return result
    if not present:
        result.notes.append("view metadata file already gone: nothing to do")
        return result
    if ctx.dry_run:
        result.would_delete.append(metadata_uri)
        return result
    ctx.fence()
    tally(result, bulk_delete(ctx.resolver, [metadata_uri], check=ctx.still_held), present)
    return result
