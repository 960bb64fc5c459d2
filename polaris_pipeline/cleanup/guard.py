"""The guard a handler deletes through: a PathGuard on the recorded roots, or a refusal."""

from __future__ import annotations

from collections.abc import Sequence

from polaris_pipeline.cleanup.context import CleanupContext, CleanupTally
from polaris_pipeline.cleanup.roots import RecordedRoots, recorded_roots
from polaris_pipeline.cleanup.shared_location import check_shared_location
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.storage.guard import PathGuard
from polaris_pipeline.storage.uri import same_location
from polaris_pipeline.tasks.decoded import ENTITY_LOCATION_KEY
from polaris_pipeline.tasks.payloads import DroppedEntity


def _no_roots_reason(entity: DroppedEntity | None) -> str:
    where = "no storageLocation"
    if entity is not None:
        where += f" and the dropped entity no {ENTITY_LOCATION_KEY!r} property"
    return (
        f"the catalog recorded no table location (the task has {where}); "
        "refused without reading or deleting anything"
    )


class Guard:
    """A PathGuard on the recorded roots, or the reason there is none (all refused)."""

    def __init__(
        self,
        guard: PathGuard | None,
        reason: str | None = None,
        roots: RecordedRoots | None = None,
    ) -> None:
        self._guard = guard
        self._reason = reason
        self.roots = roots

    @classmethod
    def build(cls, ctx: CleanupContext, entity: DroppedEntity | None = None) -> Guard:
        """The guard for the task's table, on the roots the catalog recorded only.

        ``entity`` is the dropped table or view, for the table and view handlers;
        child tasks have only their own internal properties.
        """
        roots = recorded_roots(ctx.task, entity)
        if roots is None:
            return cls(None, _no_roots_reason(entity))
        try:
            guard = PathGuard.for_table(roots.location, roots.properties, ctx.config)
        except GuardRefusal as e:
            return cls(None, f"no usable table location ({e.reason})", roots)
        return cls(guard, roots=roots)

    def check(self, uri: str) -> GuardRefusal | None:
        """None when ``uri`` may be deleted, else the refusal."""
        if self._guard is None:
            return GuardRefusal(uri, self._reason or "no guard")
        try:
            self._guard.check(uri)
        except GuardRefusal as e:
            # Drop the traceback: a batch may hold 100,000 refusals.
            return e.with_traceback(None)
        return None

    @property
    def delete_roots(self) -> tuple[str, ...]:
        """The admitted roots, where a local delete starts its no-follow walk (see
        ``storage.local_walk``); none without a guard."""
        return self._guard.roots if self._guard is not None else ()

    def allows(self, uri: str) -> bool:
        """Whether ``uri`` may be deleted (nothing recorded): for checksum sidecars."""
        return self.check(uri) is None

    def admit(self, uri: str, result: CleanupTally) -> bool:
        """Check ``uri``; a refusal is recorded in ``result``."""
        refusal = self.check(uri)
        if refusal is not None:
            result.refused.append(refusal)
            return False
        return True

    def check_shared(self, ctx: CleanupContext, result: CleanupTally, files: Sequence[str]) -> None:
        """The shared-location guard before deleting ``files`` (``cleanup/shared_location.py``):
        raises SharedLocationRefusal, or notes the task's override. Without recorded
        roots this guard refuses every path anyway."""
        if self.roots is None:
            return
        roots = [self.roots.location, *self.roots.properties.values()]
        check_shared_location(ctx, result, self.roots.location, roots, files)

    def admit_declared_location(
        self, metadata_uri: str, declared: object, result: CleanupTally
    ) -> bool:
        """Whether the ``location`` a metadata file declares is the recorded root.

        One location by the rule of ``storage.uri`` (``file:/x`` is ``file:///x``,
        ``s3a://`` is ``s3://``, a trailing slash does not count). Polaris writes
        ``storageLocation`` from the metadata's own ``location``, so a real file
        agrees; a wider location (the namespace directory) would make the file's
        other paths look like the table's, a narrower or a sibling one means the
        file is not this table's. A disagreement is recorded as a refusal of the
        metadata file: nothing the file names is then scheduled or deleted.
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
