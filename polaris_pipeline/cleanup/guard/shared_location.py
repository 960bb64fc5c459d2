"""The shared-location guard of the referenced purge: no live entity may use the files.

A dropped table's (or view's) files are deleted only while no live table or view
shares them: one in any realm or catalog at, above or under any of the task's
recorded roots (its location, and its ``write.data.path``-style roots, which the
path guard admits deletes under too; Polaris's overlap rule,
``metastore/overlap.py``; a namespace or catalog above it is where tables live and
does not count), nor one whose
``metadata-location`` is a file about to be deleted (a table registered over the
dropped one's metadata file). Checked before a table plans its children or a
view deletes its file, and again before each chunk of deletes of every task,
children included, so that a table created at the path meanwhile stops the rest.

A hit that is the dropped entity itself, live again, is no refusal: a live table or
view of the task's realm whose ``metadata-location`` is exactly the dropped entity's
last metadata file (re-registered by Spark or any client) ends the purge as
``restored`` (``TableRestored``; parent and children, nothing deleted), whatever else
the check found and even under the override below: deleting a live table's files is
never what an operator meant. The file is the parent's (its dropped entity), handed
down to its children as ``DROPPED_METADATA_KEY``. Another realm's table of the same
file is another table (realms are separate): refused as any overlap.

Any other hit refuses the task permanently (``SharedLocationRefusal``: dead-lettered at
once, naming the live entity) unless an operator checked it and requeued the task
with ``--allow-shared-location`` (``Prop.ALLOW_SHARED_LOCATION`` on its row):
then the purge goes on and the result says what was overridden. The override is
for the referenced purge only; the unreferenced phase keeps refusing such a prefix.
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
    """Raise ``SharedLocationRefusal`` when a live entity shares ``location`` or uses one
    of ``files`` (see the module docstring); with the task's override, note it instead.

    ``location``: the task's recorded table location; ``roots``: every recorded root
    (the location and ``write.data.path``-style roots), where ``files`` lie: each is
    looked up, as the path guard admits deletes under each.
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
        found += live.metadata_users(_locations(roots), files)
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
