"""What a cleanup handler is given, and what it reports back.

Handlers do not know about leases or the metastore: the runner hands them a
``fence`` to call before every destructive step and a ``create_children`` that
inserts child tasks in one transaction. That keeps handlers testable on their
own and keeps the lease rules in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from polaris_pipeline.cleanup.stages import ChildStage, Staged
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import NewTask, TaskRow
from polaris_pipeline.tasks.release import FIRST_RELEASE, PolarisRelease
from polaris_pipeline.unreferenced.report import UnreferencedReport

if TYPE_CHECKING:
    # Only a type here; importing the resolver brings in pyiceberg's file IO.
    from polaris_pipeline.metastore.overlap import LiveLocations
    from polaris_pipeline.storage.deletion_record import DeletionRecord
    from polaris_pipeline.storage.resolve import StorageResolver

# Polaris's TABLE_METADATA_CLEANUP_BATCH_SIZE default.
METADATA_BATCH_SIZE = 10
# S3 DeleteObjects takes at most 1000 keys per request.
DELETE_CHUNK_SIZE = 1000


def _no_fence() -> None:
    return None


@dataclass
class CleanupContext:
    task: TaskRow
    resolver: StorageResolver
    config: StorageConfig
    # Raises LeaseLost when the lease is gone; call before each destructive step.
    fence: Callable[[], None] = _no_fence
    # Cheap check before every single delete: free while the lease period the
    # last fence saw still runs, a new fence once it has passed.
    still_held: Callable[[], None] = _no_fence
    # Inserts the children in one transaction, leased by the current holder; returns them.
    create_children: Callable[[Sequence[NewTask]], Sequence[NewTask]] | None = None
    new_task_id: Callable[[], int] | None = None
    dry_run: bool = False
    # (done, total, what) for long deletes; total may be 0 when unknown.
    progress: Callable[[int, int, str], None] | None = None
    metadata_batch_size: int = METADATA_BATCH_SIZE
    delete_chunk_size: int = DELETE_CHUNK_SIZE
    # The Polaris release that reads the children we write (``tasks/release.py``):
    # their payloads take its shape. Unknown: 1.0, whose shape 1.0-1.6 read.
    release: PolarisRelease = FIRST_RELEASE
    # The live entities of the whole metastore, for the shared-location guard
    # (``cleanup/guard/shared_location.py``). The runner always gives one; None (a handler
    # run on its own, in a test) skips that guard.
    live: LiveLocations | None = None
    # The attempt's deletion record (``storage/deletion_record.py``), when the
    # deployment keeps one: opened before the first delete, a chunk's paths added
    # after it. None: no record (the default, and every dry run).
    record: DeletionRecord | None = None
    # The catalog's storage_configuration_info, looked up because the task carries
    # none (``execution/task_storage.py``): a table hands it down to its children.
    catalog_storage_info: str | None = None
    # ``task`` decoded once, when the caller has it (the run start decoded it).
    decoded_task: InitVar[DecodedTask | None] = None
    # ``task`` decoded (its kind, payload, table): the handlers read it, never the row's
    # ``data``. Decoded from ``task`` when not given.
    decoded: DecodedTask = field(init=False)

    def __post_init__(self, decoded_task: DecodedTask | None) -> None:
        self.decoded = (
            decoded_task
            if decoded_task is not None and decoded_task.row is self.task
            else DecodedTask.from_row(self.task)
        )


class _ResultReading:
    """What a tally and a result both say: read from the fields alone."""

    refused: Sequence[GuardRefusal]
    failed: Mapping[str, str]
    child_stages: Sequence[tuple[ChildStage, Sequence[NewTask]]]

    @property
    def children(self) -> list[NewTask]:
        """Every child created, stage by stage."""
        return [child for _, stage in self.child_stages for child in stage]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.refused

    def error_summary(self) -> str | None:
        """One line saying why the attempt failed, or None when it did not."""
        parts: list[str] = []
        if self.refused:
            first = self.refused[0]
            parts.append(
                f"guard refused {len(self.refused)} path(s), first {first.path!r}: {first.reason}"
            )
        if self.failed:
            uri, err = next(iter(self.failed.items()))
            parts.append(f"{len(self.failed)} delete(s) failed, first {uri!r}: {err}")
        return "; ".join(parts) or None


@dataclass(frozen=True)
class CleanupResult(_ResultReading):
    """What one handler run did (or, in a dry run, would do): made once, from a tally
    (``CleanupTally.freeze``), and never changed."""

    deleted: int = 0
    # Hadoop checksum sidecars (.NAME.crc) deleted with local files; not in ``deleted``.
    sidecars_deleted: int = 0
    missing: int = 0
    bytes_freed: int | None = 0
    # Files deleted on a store that keeps deleted objects (versioning, soft delete):
    # in ``deleted``, their bytes never in ``bytes_freed`` but in ``bytes_retained``
    # (None: some size was not known). ``retention_unknown``: deleted where the store
    # would not say whether it keeps them (``storage/retention_probe.py``).
    retained: int = 0
    bytes_retained: int | None = 0
    retention_unknown: int = 0
    failed: Mapping[str, str] = field(default_factory=dict)  # uri -> error
    refused: Sequence[GuardRefusal] = ()
    # The children created, by stage of the engine's plan (``stages.CHILD_STAGES``).
    child_stages: Sequence[tuple[ChildStage, Sequence[NewTask]]] = ()
    would_delete: Sequence[str] = ()  # dry run only
    deleted_paths_sample: Sequence[str] = ()  # first few, for run logs
    notes: Sequence[str] = ()
    # The live entity the shared-location guard found, when the task's override
    # (``allowSharedLocation``) let the purge go on anyway; None: nothing overridden.
    shared_location_override: str | None = None
    # The table's unreferenced files, once the phase ran (``unreferenced/listing.py``).
    unreferenced: UnreferencedReport | None = None

    def thaw(self) -> CleanupTally:
        """A tally starting from this result (its own copies: this result stays as it is)."""
        return CleanupTally(**_copied(self, list))


@dataclass
class CleanupTally(_ResultReading):
    """A handler's result while it runs, added to in place: ``CleanupResult``'s fields
    (their meaning and defaults are there). ``start`` one, ``freeze`` it once done."""

    deleted: int
    sidecars_deleted: int
    missing: int
    bytes_freed: int | None
    retained: int
    bytes_retained: int | None
    retention_unknown: int
    failed: dict[str, str]
    refused: list[GuardRefusal]
    child_stages: Staged[NewTask]
    would_delete: list[str]
    deleted_paths_sample: list[str]
    notes: list[str]
    shared_location_override: str | None
    unreferenced: UnreferencedReport | None

    @classmethod
    def start(cls) -> CleanupTally:
        """An empty tally: nothing done yet."""
        return CleanupResult().thaw()

    def freeze(self) -> CleanupResult:
        """The result as it stands, made once: later additions to the tally do not reach it."""
        return CleanupResult(**_copied(self, tuple))


def _copied(source: CleanupResult | CleanupTally, make: type[Any]) -> dict[str, Any]:
    """``source``'s fields, each container a new one (``make``: tuple or list)."""
    values = {f.name: getattr(source, f.name) for f in fields(source)}
    for name, value in values.items():
        if isinstance(value, Mapping):
            values[name] = dict(value)
        elif isinstance(value, list | tuple):
            values[name] = make(value)
    values["child_stages"] = make((stage, make(kids)) for stage, kids in source.child_stages)
    return values
