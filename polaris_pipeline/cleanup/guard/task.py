"""The guard of one task: the path rule on its recorded roots and the shared-location
rule, asked through one object (``Guard.for_task``), or a refusal of every path."""

from __future__ import annotations

from collections.abc import Sequence

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.guard.paths import PathGuard
from polaris_pipeline.cleanup.guard.shared_location import check_shared_location
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.storage.uri import same_location
from polaris_pipeline.tasks.payloads import DroppedEntity
from polaris_pipeline.tasks.roots import ENTITY_LOCATION_KEY, RecordedRoots


def _no_roots_reason(entity: DroppedEntity | None) -> str:
    where = "no storageLocation"
    if entity is not None:
        where += f" and the dropped entity no {ENTITY_LOCATION_KEY!r} property"
    return (
        f"the catalog recorded no table location (the task has {where}); "
        "refused without reading or deleting anything"
    )


class Guard:
    """A PathGuard on the task's recorded roots (or the reason there is none: all refused)
    and the shared-location rule over the same roots."""

    def __init__(
        self,
        ctx: CleanupContext,
        guard: PathGuard | None,
        reason: str | None = None,
        roots: RecordedRoots | None = None,
    ) -> None:
        self._ctx = ctx
        self._guard = guard
        self._reason = reason
        self.roots = roots

    @classmethod
    def for_task(cls, ctx: CleanupContext) -> Guard:
        """The guard of ``ctx``'s task, on the roots the catalog recorded only
        (``DecodedTask.roots``: a table's or view's from its task and dropped entity,
        a child's from its own internal properties)."""
        roots = ctx.decoded.roots
        if roots is None:
            return cls(ctx, None, _no_roots_reason(ctx.decoded.entity))
        try:
            guard = PathGuard.for_table(roots.location, roots.properties, ctx.config)
        except GuardRefusal as e:
            return cls(ctx, None, f"no usable table location ({e.reason})", roots)
        return cls(ctx, guard, roots=roots)

    def check(self, uri: str) -> GuardRefusal | None:
        """The path rule: None when ``uri`` may be deleted, else the refusal."""
        if self._guard is None:
            return GuardRefusal(uri, self._reason or "no guard")
        try:
            self._guard.check(uri)
        except GuardRefusal as e:
            # Drop the traceback: a batch may hold 100,000 refusals.
            return e.with_traceback(None)
        return None

    def admit(self, uri: str, result: CleanupTally) -> bool:
        """The path rule on ``uri`` (read or planned); a refusal is recorded in ``result``."""
        refusal = self.check(uri)
        if refusal is not None:
            result.refused.append(refusal)
            return False
        return True

    def allows(self, uri: str) -> bool:
        """Whether ``uri`` may be deleted (nothing recorded): for checksum sidecars."""
        return self.check(uri) is None

    def may_delete(self, result: CleanupTally, uris: Sequence[str]) -> list[str]:
        """Of ``uris``, those the path rule admits (none without recorded roots; refusals recorded
        in ``result``) once the shared-location rule passed them; asked right before each delete.
        Raises SharedLocationRefusal or TableRestored, or notes the task's override.
        """
        allowed = [uri for uri in uris if self.admit(uri, result)]
        if self.roots is not None and allowed:
            roots = [self.roots.location, *self.roots.properties.values()]
            check_shared_location(self._ctx, result, self.roots.location, roots, allowed)
        return allowed

    @property
    def delete_roots(self) -> tuple[str, ...]:
        """The admitted roots, where a local delete starts its no-follow walk (see
        ``storage.local_walk``); none without a guard."""
        return self._guard.roots if self._guard is not None else ()

    def admit_declared_location(
        self, metadata_uri: str, declared: object, result: CleanupTally
    ) -> bool:
        """Whether the ``location`` a metadata file declares is the recorded root (``storage.uri``).

        Polaris writes ``storageLocation`` from the metadata's own ``location``, so a real file
        agrees; a wider one would make other paths look like the table's, a narrower or sibling
        one means the file is not this table's. A disagreement refuses the metadata file: nothing
        it names is scheduled or deleted.
        """
        if self.roots is None:
            return self.admit(metadata_uri, result)
        if isinstance(declared, str) and same_location(self.roots.location, declared):
            return True
        result.refused.append(
            GuardRefusal(
                metadata_uri,
                f"the metadata file declares location {declared!r}, but the catalog "
                f"recorded {self.roots.location!r} ({self.roots.source})",
            )
        )
        return False
