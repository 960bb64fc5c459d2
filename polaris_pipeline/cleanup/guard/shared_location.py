"""The shared-location guard of the referenced purge: no live entity may use the files.

Files are deleted only while no live table or view, in any realm or catalog, lies at,
above or under any recorded root (location and ``write.data.path``-style roots;
``metastore/overlap.py``; a namespace or catalog above does not count), nor has a file
about to be deleted as its ``metadata-location``. Checked before planning children or
deleting a view's file, and before each chunk of every task, so a table created at the
path meanwhile stops the rest.

A live table or view of the task's realm whose ``metadata-location`` is exactly the
dropped entity's last metadata file (handed to children as ``DROPPED_METADATA_KEY``) is
the drop restored (re-registered by any client): the purge ends ``restored``
(``TableRestored``), nothing deleted, whatever else was found and even under the
override: deleting a live table's files is never what an operator meant. Another realm's
table of that file is another table: refused.

Any other hit refuses permanently (``SharedLocationRefusal``: dead-lettered at once,
naming the entity) unless an operator requeued with ``--allow-shared-location``
(``Prop.ALLOW_SHARED_LOCATION``); the result then says what was overridden. The
unreferenced phase keeps refusing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.errors import SHARED_LOCATION_REFUSED, SharedLocationRefusal, TableRestored
from polaris_pipeline.metastore.overlap import Overlap
from polaris_pipeline.storage.uri import Location, parse_location
from polaris_pipeline.tasks.model import Prop

# How many live entities a refusal names (the rest are counted).
NAMED = 3
# The internal property of a child task naming its parent's dropped metadata file
# (extra keys are safe: Polaris reads a map): a child has no dropped entity to read it from.
DROPPED_METADATA_KEY = "droppedMetadataLocation"


def dropped_metadata_file(ctx: CleanupContext) -> str | None:
    """The dropped entity's last metadata file: the task's own entity's, else the one its
    parent handed down; None when neither names one."""
    entity = ctx.decoded.entity
    if entity is not None and entity.metadata_location:
        return entity.metadata_location
    handed = ctx.task.internal_properties.get(DROPPED_METADATA_KEY, "").strip()
    return handed or None


def describe(found: Sequence[Overlap]) -> str:
    """The live entities found, as a refusal or an override names them."""
    more = f" (and {len(found) - NAMED} more)" if len(found) > NAMED else ""
    return "; ".join(hit.describe() for hit in found[:NAMED]) + more


def _locations(uris: Iterable[str]) -> list[Location]:
    out: list[Location] = []
    for uri in uris:
        try:
            out.append(parse_location(uri, directory=True))
        except ValueError:
            continue  # the path guard refuses a malformed root; nothing to look up
    return out


def check_shared_location(
    ctx: CleanupContext,
    result: CleanupTally,
    location: str,
    roots: Sequence[str],
    files: Sequence[str],
) -> None:
    """Raise ``SharedLocationRefusal`` when a live entity shares ``location`` or uses one of
    ``files`` (see the module docstring); with the task's override, note it instead.

    ``roots``: every recorded root, each looked up, as the path guard admits deletes under each.
    MetastoreError (the check could not be made) propagates: a transient failure.
    """
    live = ctx.live
    if live is None:
        return
    found: list[Overlap] = []
    seen: set[tuple[str, int]] = set()
    for prefix in dict.fromkeys(_locations([location, *roots])):
        for hit in live.overlaps(prefix):
            if (hit.realm_id, hit.entity_id) not in seen:
                seen.add((hit.realm_id, hit.entity_id))
                found.append(hit)
    if files:
        found += live.metadata_users(files)
    if not found:
        return
    metadata_file = dropped_metadata_file(ctx)
    if metadata_file is not None:
        restored = live.restored_as(ctx.task.realm_id, metadata_file)
        if restored is not None:
            raise TableRestored(restored.entity(), metadata_file)
    text = describe(found)
    if ctx.task.shared_location_allowed:
        if result.shared_location_override is None:
            result.shared_location_override = text
            result.notes.append(
                f"shared-location guard overridden ({Prop.ALLOW_SHARED_LOCATION}=true): {text}"
            )
        return
    task = ctx.task
    raise SharedLocationRefusal(
        location,
        f"{SHARED_LOCATION_REFUSED}, the purge stopped before deleting: {text}. Once checked, "
        f"`polaris-pipeline tasks requeue {task.id} --realm {task.realm_id} "
        "--allow-shared-location` lets the purge go on",
    )
