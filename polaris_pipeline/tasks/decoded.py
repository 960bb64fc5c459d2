"""A task decoded once from its row: its kind, its payload and its table.

``DecodedTask.from_row`` is the one place a row's ``taskType`` and ``data`` are decoded:
a frozen object that travels from the run start to the handler, tags and report. Task
type names live here too. An undecodable payload is kept as its ``PayloadError``:
``require_kind`` and the payload accessors raise it where the work needs them; views
read ``problem`` and whatever did decode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.storage.uri import normalize_uri
from polaris_pipeline.tasks.model import Prop, TaskRow, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    DroppedEntity,
    ManifestCleanupPayload,
    TableIdentifier,
    decode_batch_cleanup,
    decode_child_table_id,
    decode_dropped_entity,
    decode_manifest_cleanup,
    table_identifier,
)
from polaris_pipeline.tasks.ref import TableRef
from polaris_pipeline.tasks.roots import (
    ROOT_PROPERTIES,
    STORAGE_LOCATION_KEY,
    RecordedRoots,
    recorded_roots,
)

Payload = DroppedEntity | ManifestCleanupPayload | BatchCleanupPayload
_P = TypeVar("_P", DroppedEntity, ManifestCleanupPayload, BatchCleanupPayload)

# The decoder of each kind's ``data``: the one table of task types and payloads.
_DECODERS: dict[TaskType, Callable[[str], Payload]] = {
    TaskType.ENTITY_CLEANUP_SCHEDULER: decode_dropped_entity,
    TaskType.MANIFEST_FILE_CLEANUP: decode_manifest_cleanup,
    TaskType.BATCH_FILE_CLEANUP: decode_batch_cleanup,
}
_CHILD_KINDS = (TaskType.MANIFEST_FILE_CLEANUP, TaskType.BATCH_FILE_CLEANUP)


def task_type_name(code: str | None) -> str:
    """A ``taskType`` code as shown to people: ``batch_file_cleanup``; ``?<code>`` when unknown.

    The CLI, run tags, logs and metadata all use it.
    """
    kind = TaskType.of_code(code)
    return kind.name.lower() if kind is not None else f"?{(code or '')[:20]}"


def polaris_type_name(code: str | None) -> str | None:
    """Polaris's name of a ``taskType`` code (``BATCH_FILE_CLEANUP``), as its events and
    spans carry it; the raw code when it is not one of Polaris's, None when absent."""
    kind = TaskType.of_code(code)
    return kind.name if kind is not None else code


def _table(
    task: TaskRow,
    identifier: TableIdentifier | None,
    entity: DroppedEntity | None,
    roots: RecordedRoots | None,
) -> TableRef | None:
    if identifier is None or (entity is not None and entity.is_view):
        return None
    return TableRef(
        realm=task.realm_id,
        namespace=identifier.namespace,
        name=identifier.name,
        catalog_id=(entity.catalog_id or None) if entity is not None else None,
        location=normalize_uri(roots.location) if roots is not None else None,
    )


def _named(exc: PayloadError, task: TaskRow) -> PayloadError:
    return exc if exc.task else exc.for_task(task.label)


@dataclass(frozen=True)
class DecodedTask:
    """One task row decoded once: ``kind``, ``payload``, ``table``; never edited.

    ``error``: why the kind or the payload did not decode (None: both did).
    ``identifier``: the table (or view) the payload names, also when only a child's
    ``tableId`` decoded. ``table``: the dropped table, None for a view or a payload
    that names none. ``roots``: the table roots the catalog recorded (``tasks/roots.py``),
    from the row and its dropped entity; None when it recorded no location.
    """

    row: TaskRow
    kind: TaskType | None = None
    payload: Payload | None = None
    identifier: TableIdentifier | None = None
    table: TableRef | None = None
    error: PayloadError | None = None
    roots: RecordedRoots | None = None

    @classmethod
    def from_row(cls, row: TaskRow) -> DecodedTask:
        """Decode ``row``'s kind and payload; never raises for a malformed payload."""
        try:
            kind = row.task_type()
        except PayloadError as exc:
            return cls(row, error=_named(exc, row), roots=recorded_roots(row))
        try:
            payload = _DECODERS[kind](row.data())
        except PayloadError as exc:
            identifier = _child_table_id(row) if kind in _CHILD_KINDS else None
            roots = recorded_roots(row)
            table = _table(row, identifier, None, roots)
            return cls(row, kind, None, identifier, table, _named(exc, row), roots)
        entity = payload if isinstance(payload, DroppedEntity) else None
        identifier = (
            table_identifier(payload) if isinstance(payload, DroppedEntity) else payload.table_id
        )
        roots = recorded_roots(row, entity)
        return cls(
            row, kind, payload, identifier, _table(row, identifier, entity, roots), None, roots
        )

    @classmethod
    def of(cls, task: TaskRow | DecodedTask) -> DecodedTask:
        """``task`` itself when already decoded, else decoded from its row."""
        return task if isinstance(task, DecodedTask) else cls.from_row(task)

    def reread(self, row: TaskRow) -> DecodedTask:
        """``row``, a later read of this task's row, decoded: this decoding kept when what it came
        from is unchanged (a held row changes only in its lease and attempt), else ``from_row``.
        """
        if row is self.row:
            return self
        if _decoded_from(row) != _decoded_from(self.row):
            return DecodedTask.from_row(row)
        return dataclasses.replace(self, row=row)

    @property
    def label(self) -> str:
        return self.row.label

    @property
    def type_name(self) -> str:
        """``task_type_name`` of the row's ``taskType``."""
        return task_type_name(self.row.task_type_code)

    @property
    def problem(self) -> str | None:
        """Why the task did not decode, without its label; None when it did."""
        return self.error.reason if self.error is not None else None

    @property
    def entity(self) -> DroppedEntity | None:
        """The dropped table or view of an ENTITY_CLEANUP task that decoded, else None."""
        return self.payload if isinstance(self.payload, DroppedEntity) else None

    @property
    def is_view(self) -> bool:
        return self.entity is not None and self.entity.is_view

    def require_kind(self) -> TaskType:
        """The task's kind, or the PayloadError (naming the task) that kept it unknown."""
        if self.kind is None:
            raise self._error()
        return self.kind

    def require(self, of_type: type[_P]) -> _P:
        """The payload as ``of_type``, or the PayloadError naming the task."""
        if isinstance(self.payload, of_type):
            return self.payload
        if self.error is not None:
            raise self._error()
        raise PayloadError(f"payload is not a {of_type.__name__}", task=self.label)

    def _error(self) -> PayloadError:
        # A fresh exception each time: one raised twice would grow its traceback.
        assert self.error is not None
        return PayloadError(self.error.reason, task=self.error.task)


def _decoded_from(row: TaskRow) -> tuple[object, ...]:
    """What ``from_row`` reads of a row: the same values decode the same."""
    props = row.properties
    return (
        row.realm_id,
        row.id,
        row.name,
        row.properties_error,
        props.get(Prop.TASK_TYPE),
        props.get(Prop.DATA),
        Prop.ORIGINAL in props,
        # The recorded roots: the location and root properties the catalog handed the task.
        *(row.internal_properties.get(key) for key in (STORAGE_LOCATION_KEY, *ROOT_PROPERTIES)),
    )


def _child_table_id(row: TaskRow) -> TableIdentifier | None:
    """A child's ``tableId`` when the rest of its payload does not decode."""
    try:
        return decode_child_table_id(row.data())
    except PayloadError:
        return None
