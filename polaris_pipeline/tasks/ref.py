"""How a task is referred to: ``TaskRef`` (which task), ``Lease`` (a claim on it), and
``TableRef`` (the dropped table it cleans up).

Built from a decoded ``TaskRow`` by ``from_row`` (the lease statement's rows by
``Lease.from_leased_columns``). ``to_dict``/``from_dict`` are the JSON-safe forms of
run configs and child payloads: ``realm_id``, ``task_id`` (a decimal string: ids are
63-bit), ``entity_version``, ``name``, ``task_type``; a lease adds ``executor_id``,
``attempt``, ``start_time_ms``. ``from_dict`` raises ValueError naming the bad key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import TableIdentifier


def _label(realm_id: str, task_id: int, name: str) -> str:
    return f"{realm_id}/{task_id} {name!r}"


def _field(data: Mapping[str, Any], key: str) -> Any:
    if data.get(key) is None:
        raise ValueError(f"task reference has no {key!r}")
    return data[key]


def _int_field(data: Mapping[str, Any], key: str, default: int | None = None) -> int:
    if default is not None and data.get(key) is None:
        return default
    value = _field(data, key)
    # bool is an int; a float would be silently truncated: neither is an id or a count.
    if isinstance(value, (bool, float)):
        raise ValueError(f"task reference {key!r} must be an integer, not {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"task reference {key!r} is not an integer: {str(value)[:40]!r}") from None


@dataclass(frozen=True)
class TaskRef:
    """Which task: enough to find it, name it and tag its runs. Not a claim on it.

    ``entity_version`` is the version the row had when this was read (0: not
    known, e.g. a reference written before versions were carried).
    """

    realm_id: str
    task_id: int
    entity_version: int = 0
    name: str = ""
    task_type_code: str | None = None

    @classmethod
    def from_row(cls, row: TaskRow) -> TaskRef:
        return cls(
            realm_id=row.realm_id,
            task_id=int(row.id),
            entity_version=int(row.entity_version),
            name=row.name or "",
            task_type_code=row.task_type_code,
        )

    @property
    def label(self) -> str:
        return _label(self.realm_id, self.task_id, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "realm_id": self.realm_id,
            "task_id": str(self.task_id),
            "entity_version": self.entity_version,
            "name": self.name,
            "task_type": self.task_type_code,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskRef:
        return cls(
            realm_id=str(_field(data, "realm_id")),
            task_id=_int_field(data, "task_id"),
            entity_version=_int_field(data, "entity_version", default=0),
            name=str(data.get("name") or ""),
            task_type_code=None if data.get("task_type") is None else str(data["task_type"]),
        )


@dataclass(frozen=True)
class Lease:
    """A lease held on one task.

    ``executor_id`` plus ``attempt`` (the ``attemptCount`` it wrote) is the fencing token: every
    grant increments ``attemptCount``, so a later holder never matches an earlier one, even
    with the same executor id. ``entity_version``: the row's version after the lease's last write.
    """

    realm_id: str
    task_id: int
    executor_id: str
    attempt: int
    entity_version: int
    start_time_ms: int
    task_type_code: str | None = None
    name: str = ""

    @classmethod
    def of(cls, ref: TaskRef, *, executor_id: str, attempt: int, start_time_ms: int) -> Lease:
        """``ref`` held by ``executor_id``: ``ref.entity_version`` is the leased row's."""
        if not executor_id:
            raise ValueError(f"lease on {ref.label}: empty executor id")
        return cls(
            realm_id=ref.realm_id,
            task_id=ref.task_id,
            executor_id=executor_id,
            attempt=attempt,
            entity_version=ref.entity_version,
            start_time_ms=start_time_ms,
            task_type_code=ref.task_type_code,
            name=ref.name,
        )

    @classmethod
    def from_row(cls, row: TaskRow) -> Lease:
        """The lease ``row`` records (its holder, attempt and start); ValueError if none."""
        ref = TaskRef.from_row(row)
        executor, start = row.executor_id, row.start_time_ms
        if not executor or start is None:
            raise ValueError(f"task {ref.label} records no lease holder")
        return cls.of(
            ref, executor_id=executor, attempt=int(row.attempt_count), start_time_ms=int(start)
        )

    @classmethod
    def from_leased_columns(cls, columns: Sequence[Any], executor_id: str) -> Lease:
        """A lease from a leased row of ``queries.LEASE_BATCH``, for ``executor_id``.

        Columns by position (leased, realm_id, id, name, entity_version, attempt, task_type_code,
        now_ms): named access costs ~0.5 µs a field, several times the rest of a lease's client
        cost. tests/test_transitions.py holds it equal to ``from_row`` of the written row.
        """
        _, realm_id, task_id, name, version, attempt, task_type_code, start = columns
        return cls(realm_id, task_id, executor_id, attempt, version, start, task_type_code, name)

    @property
    def ref(self) -> TaskRef:
        return TaskRef(
            self.realm_id, self.task_id, self.entity_version, self.name, self.task_type_code
        )

    @property
    def label(self) -> str:
        return _label(self.realm_id, self.task_id, self.name)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.ref.to_dict(),
            "executor_id": self.executor_id,
            "attempt": self.attempt,
            "start_time_ms": self.start_time_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Lease:
        _int_field(data, "entity_version")  # required of a lease, optional of a reference
        return cls.of(
            TaskRef.from_dict(data),
            executor_id=str(_field(data, "executor_id")),
            attempt=_int_field(data, "attempt"),
            start_time_ms=_int_field(data, "start_time_ms"),
        )


@dataclass(frozen=True)
class TableRef:
    """A dropped table, as a run and the catalog name it (``DecodedTask.table``)."""

    realm: str
    namespace: tuple[str, ...]
    name: str
    catalog_id: int | None = None
    # The table's base location as the catalog recorded it (normalized), if it did.
    location: str | None = None

    @property
    def label(self) -> str:
        """``namespace.table``: Iceberg's own way of writing an identifier."""
        return str(TableIdentifier(self.namespace, self.name))

    def to_json(self) -> dict[str, Any]:
        return {
            "realm": self.realm,
            "namespace": list(self.namespace),
            "name": self.name,
            "catalog_id": self.catalog_id,
            "location": self.location,
        }

    @classmethod
    def from_json(cls, value: object) -> TableRef | None:
        """The ref ``to_json`` wrote; None for anything else (a step of an older
        release, or metadata a user's code wrote under the same name)."""
        if not isinstance(value, Mapping):
            return None
        realm, namespace, name = value.get("realm"), value.get("namespace"), value.get("name")
        catalog_id, location = value.get("catalog_id"), value.get("location")
        if not (isinstance(realm, str) and realm and isinstance(name, str) and name):
            return None
        if not isinstance(namespace, list) or not all(isinstance(p, str) for p in namespace):
            return None
        if catalog_id is not None and (
            isinstance(catalog_id, bool) or not isinstance(catalog_id, int)
        ):
            return None
        if location is not None and not isinstance(location, str):
            return None
        return cls(realm, tuple(namespace), name, catalog_id, location or None)
