"""The task model: Polaris TASK rows, their types, and the states derived from them.

A state is always computed from a row and the database clock, never stored as a
second source of truth. The same rule is written once more as SQL in
``metastore.predicates``; a test holds the two in agreement.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from polaris_pipeline.errors import PayloadError, first_error
from polaris_pipeline.tasks.release import PolarisRelease, TaskEvents
from polaris_pipeline.unreferenced.mode import DEFAULT_UNREFERENCED_MODE, UnreferencedMode

TASK_TYPE_CODE = 8
# The entity type of a catalog, whose internal properties hold its storage configuration.
CATALOG_TYPE_CODE = 4
TABLE_LIKE_TYPE_CODE = 7
ICEBERG_TABLE_SUB_TYPE = 2
ICEBERG_VIEW_SUB_TYPE = 3


class TaskType(IntEnum):
    """Polaris's ``AsyncTaskType`` codes, stored as the ``taskType`` property."""

    ENTITY_CLEANUP_SCHEDULER = 1
    MANIFEST_FILE_CLEANUP = 2
    BATCH_FILE_CLEANUP = 3

    @property
    def code(self) -> str:
        """The code as the ``taskType`` property holds it (``"2"``): every value is a string."""
        return str(int(self))

    @classmethod
    def of_code(cls, code: str | None) -> TaskType | None:
        """The type a ``taskType`` value names; None when absent or not one of Polaris's."""
        number = _int_or_none(code)
        return cls(number) if number is not None and number in cls._value2member_map_ else None


class TaskState(StrEnum):
    PENDING = "pending"  # never leased, within the grace period: Polaris may be running it
    ORPHANED = "orphaned"  # available to our sweeper
    LEASED = "leased"  # an executor holds an unexpired lease
    BACKING_OFF = "backing-off"  # last attempt failed; next attempt time in the future
    DEAD = "dead"  # dead-lettered; only an operator's requeue revives it
    # An ENTITY_CLEANUP_SCHEDULER task for an entity that is not a table or view
    # (a role, namespace, catalog, principal): Polaris writes these and never runs
    # them; they carry no files. Never leased; an operator may discard them.
    UNHANDLED = "unhandled"
    # A dropped table's purge (or a child of one) inside its catalog's hold window
    # (``tasks/hold.py``): never leased until the window ends.
    HELD = "held"


class DropTimeSource(StrEnum):
    """Where a held task's drop time comes from (``tasks/hold.py``), as the output says it."""

    DROP_EVENT = "drop event"  # Polaris's AFTER_DROP_TABLE / AFTER_DROP_VIEW row
    TASK_CREATION = "task creation"  # the task's create_timestamp: no such event


class Prop:
    """Keys of a task's ``properties``. Polaris's own first, then ours.

    Every value is a string so Polaris's parser keeps reading the row.
    """

    TASK_TYPE = "taskType"
    DATA = "data"
    EXECUTOR = "lastAttemptExecutorId"
    START_TIME = "lastAttemptStartTime"
    ATTEMPT_COUNT = "attemptCount"
    # ours
    STATUS = "lastAttemptStatus"  # "failed" | "dead" | "requeued"
    ERROR = "lastAttemptError"
    END_TIME = "lastAttemptEndTime"
    RUN_ID = "lastAttemptRunId"
    NEXT_ATTEMPT = "nextAttemptTime"
    # "true" when the last failure is one retrying cannot heal (see errors.is_permanent):
    # the task was dead-lettered at once instead of backing off.
    PERMANENT = "lastAttemptPermanent"
    CREATED_BY = "createdBy"  # "polaris-pipeline" on children we create: no grace period
    # The undecodable original of a row whose properties were not a JSON object,
    # kept when we lease it so that recording the failure loses nothing.
    ORIGINAL = "originalProperties"
    # "true": an operator checked that the dropped table shares its location with a
    # live entity and let the referenced purge go on (``tasks requeue
    # --allow-shared-location``); children of such a table carry it too.
    ALLOW_SHARED_LOCATION = "allowSharedLocation"


STATUS_FAILED = "failed"
STATUS_DEAD = "dead"
STATUS_REQUEUED = "requeued"
PERMANENT_TRUE = "true"
CREATOR = "polaris-pipeline"
MAX_ERROR_LENGTH = 2000
# Polaris's TABLE_METADATA_CLEANUP_BATCH_SIZE default.
DEFAULT_METADATA_BATCH_SIZE = 10


def check_hold_days(days: float | None) -> None:
    """A hold is a finite number of days, 0 (off) or more; a bool is not a number."""
    if days is None:
        return
    if isinstance(days, bool) or not isinstance(days, int | float):
        raise ValueError("a hold must be a number of days")
    if not math.isfinite(days) or days < 0:
        raise ValueError("a hold must be 0 (off) or a positive number of days")


def hold_days_ms(days: float) -> int:
    """``days`` of hold in milliseconds (the rule's unit)."""
    return round(days * 86_400_000)


def check_lease_timing(lease_timeout_ms: int | None, grace_ms: int | None) -> None:
    if lease_timeout_ms is not None and lease_timeout_ms <= 0:
        raise ValueError("lease timeout must be positive")
    if grace_ms is not None and grace_ms < 0:
        raise ValueError("grace period must not be negative")


def check_max_attempts(attempts: int) -> None:
    if attempts < 1:
        raise ValueError("max attempts must be at least 1")


def check_batch_size(size: int | None) -> None:
    if size is not None and size < 1:
        raise ValueError("metadata batch size must be at least 1")


def _release_text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("polaris_version must be a release such as 1.7 or 1.4.1")
    return PolarisRelease.normalise(value)


# Overrides whose values are text, not integers.
_TEXT_OVERRIDES = frozenset({"unreferenced", "polaris_version"})
# Overrides that are any number, not only an integer.
_NUMBER_OVERRIDES = frozenset({"hold_days"})


class RealmOverride(BaseModel):
    """One realm's own values; a field left None takes the global one.

    Polaris lets a realm override ``POLARIS_TASK_TIMEOUT_MILLIS`` and
    ``TABLE_METADATA_CLEANUP_BATCH_SIZE``; the grace period follows the lease
    timeout unless set. A typed model: the settings, the ``metastore`` resource and
    the component all nest this one (``realm_overrides``), each rule checked here.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lease_timeout_ms: int | None = Field(
        default=None, description="The realm's POLARIS_TASK_TIMEOUT_MILLIS."
    )
    grace_ms: int | None = Field(
        default=None, description="The realm's grace period; null: its lease timeout."
    )
    metadata_batch_size: int | None = Field(
        default=None, description="The realm's TABLE_METADATA_CLEANUP_BATCH_SIZE."
    )
    unreferenced: str | None = Field(
        default=None, description="The realm's own unreferenced mode: off, report or delete."
    )
    # Realms of one metastore may be served by different deployments.
    polaris_version: str | None = Field(
        default=None, description="The Polaris release serving the realm (1.7, 1.4.1)."
    )
    hold_days: float | None = Field(
        default=None,
        description="Days a dropped table's purge is held in this realm's catalogs (0: off).",
    )

    @field_validator("hold_days", mode="before")
    @classmethod
    def _hold(cls, value: object) -> object:
        check_hold_days(value)  # type: ignore[arg-type]
        return value

    @field_validator("unreferenced")
    @classmethod
    def _mode(cls, value: str | None) -> str | None:
        return None if value is None else UnreferencedMode.parse(value).value

    @field_validator("polaris_version", mode="before")
    @classmethod
    def _release(cls, value: object) -> str | None:
        return None if value is None else _release_text(value)

    @model_validator(mode="after")
    def _rules(self) -> RealmOverride:
        check_lease_timing(self.lease_timeout_ms, self.grace_ms)
        check_batch_size(self.metadata_batch_size)
        return self

    @staticmethod
    def values_of(value: RealmOverride | Mapping[str, Any]) -> dict[str, Any]:
        """The fields a realm's override sets, from the model or from a plain mapping."""
        if isinstance(value, RealmOverride):
            return value.model_dump(exclude_none=True)
        return dict(value)

    @classmethod
    def from_json_obj(cls, value: object, *, realm: str = "?") -> RealmOverride:
        """From ``{"lease_timeout_ms": .., "grace_ms": .., "metadata_batch_size": ..}``.

        Unknown keys and non-integer values are a ValueError naming the realm, so a
        typo in a setting is not silently the default.
        """
        if isinstance(value, RealmOverride):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"realm {realm!r}: overrides must be a JSON object")
        unknown = sorted(str(k) for k in value if k not in cls.model_fields)
        if unknown:
            raise ValueError(f"realm {realm!r}: unknown override(s) {', '.join(unknown)}")
        for key, item in value.items():
            if key in _TEXT_OVERRIDES:
                continue  # text, checked by the validators
            if key in _NUMBER_OVERRIDES:
                try:
                    check_hold_days(item)
                except ValueError as exc:
                    raise ValueError(f"realm {realm!r}: {key}: {exc}") from None
                continue
            if item is not None and (isinstance(item, bool) or not isinstance(item, int)):
                raise ValueError(f"realm {realm!r}: {key} must be an integer")
        try:
            return cls(**{str(k): v for k, v in value.items()})
        except ValidationError as exc:
            raise ValueError(f"realm {realm!r}: {first_error(exc)}") from None


@dataclass(frozen=True)
class TaskPolicy:
    """How the realms' tasks are run: leasing (timeout, grace, attempts, backoff), the
    metadata batch size, the unreferenced mode and the Polaris release. Defaults match
    Polaris where Polaris has one.

    ``realm_overrides`` gives realms their own values; ``for_realm`` resolves the
    policy one realm runs under. The rule (``TaskRow.state``) and the lease
    statement both apply it per row.
    """

    lease_timeout_ms: int = 300_000  # POLARIS_TASK_TIMEOUT_MILLIS
    grace_ms: int | None = None  # None: the lease timeout
    max_attempts: int = 8
    backoff_base_ms: int = 30_000
    backoff_max_ms: int = 3_600_000
    metadata_batch_size: int = DEFAULT_METADATA_BATCH_SIZE  # TABLE_METADATA_CLEANUP_BATCH_SIZE
    # What a dropped table's run does last with the files its metadata no longer names.
    # Part of the policy so that every Runner (CLI, task job, realm backfill) reads the
    # deployment's mode from the one object they are all built with.
    unreferenced: UnreferencedMode = DEFAULT_UNREFERENCED_MODE
    # The Polaris release that reads the rows we write; None: inferred per realm
    # (``metastore/release_probe.py``). Text, as the settings write it.
    polaris_version: str | None = None
    # Write Polaris's BEFORE/AFTER_ATTEMPT_TASK rows where the realm's release writes
    # them (True), for every release ("always"), or not (False, as Polaris's default).
    task_events: TaskEvents = False
    realm_overrides: Mapping[str, RealmOverride] = field(default_factory=dict, hash=False)
    # How long a dropped table's purge is held after the drop (``tasks/hold.py``); 0: off.
    hold_ms: int = 0
    # Catalog name -> its own hold, in every realm; beats the realm's.
    catalog_hold_ms: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        check_lease_timing(self.lease_timeout_ms, self.grace_ms)
        if self.polaris_version is not None:
            object.__setattr__(self, "polaris_version", _release_text(self.polaris_version))
        check_max_attempts(self.max_attempts)
        if self.backoff_base_ms < 0 or self.backoff_max_ms < self.backoff_base_ms:
            raise ValueError("backoff bounds must satisfy 0 <= base <= max")
        check_batch_size(self.metadata_batch_size)
        object.__setattr__(self, "unreferenced", UnreferencedMode.parse(self.unreferenced))
        if self.hold_ms < 0 or any(ms < 0 for ms in self.catalog_hold_ms.values()):
            raise ValueError("a hold must not be negative")
        object.__setattr__(self, "catalog_hold_ms", dict(self.catalog_hold_ms))
        overrides = dict(self.realm_overrides)
        for realm, override in overrides.items():
            if not isinstance(override, RealmOverride):
                raise ValueError(f"realm {realm!r}: override must be a RealmOverride")
        # A private copy (plain dict: policies are pickled into worker processes),
        # and each realm's policy resolved once: the state rule asks on every row.
        object.__setattr__(self, "realm_overrides", overrides)
        resolved = {realm: self._resolve(o) for realm, o in overrides.items()}
        object.__setattr__(self, "_by_realm", resolved)

    def _resolve(self, override: RealmOverride) -> TaskPolicy:
        timeout = override.lease_timeout_ms or self.lease_timeout_ms
        grace = override.grace_ms if override.grace_ms is not None else self.grace_ms
        return dataclasses.replace(
            self,
            lease_timeout_ms=timeout,
            grace_ms=grace,
            metadata_batch_size=override.metadata_batch_size or self.metadata_batch_size,
            unreferenced=UnreferencedMode.parse(override.unreferenced or self.unreferenced),
            polaris_version=override.polaris_version or self.polaris_version,
            hold_ms=(
                self.hold_ms if override.hold_days is None else hold_days_ms(override.hold_days)
            ),
            realm_overrides={},
        )

    def for_realm(self, realm_id: str) -> TaskPolicy:
        """The policy ``realm_id`` runs under: its overrides over the global values."""
        by_realm: dict[str, TaskPolicy] = self.__dict__["_by_realm"]
        return by_realm.get(realm_id, self)

    @property
    def shortest_lease_timeout_ms(self) -> int:
        """The shortest lease timeout of any realm: heartbeats must beat within it."""
        by_realm: dict[str, TaskPolicy] = self.__dict__["_by_realm"]
        return min([self.lease_timeout_ms, *(p.lease_timeout_ms for p in by_realm.values())])

    @property
    def holds_any(self) -> bool:
        """Whether any realm or catalog has a hold: without one the rule skips it entirely."""
        by_realm: dict[str, TaskPolicy] = self.__dict__["_by_realm"]
        return (
            self.hold_ms > 0
            or any(ms > 0 for ms in self.catalog_hold_ms.values())
            or any(p.hold_ms > 0 for p in by_realm.values())
        )

    def hold_ms_for(self, realm_id: str, catalog_name: str | None) -> int:
        """The hold of a drop in ``catalog_name`` of ``realm_id``: the catalog's, else
        the realm's."""
        if catalog_name is not None and catalog_name in self.catalog_hold_ms:
            return self.catalog_hold_ms[catalog_name]
        return self.for_realm(realm_id).hold_ms

    @property
    def effective_grace_ms(self) -> int:
        return self.lease_timeout_ms if self.grace_ms is None else self.grace_ms

    def backoff_ms(self, attempt: int, unit_random: float) -> int:
        """Exponential backoff with jitter for the attempt that just failed.

        ``unit_random`` in [0, 1) spreads retries; half the delay is fixed so a
        retry never comes straight back.
        """
        exp = self.backoff_base_ms * (2 ** max(0, min(attempt - 1, 30)))
        ceiling = min(self.backoff_max_ms, exp)
        return int(ceiling / 2 + unit_random * ceiling / 2)


# Same pattern as the SQL predicates use, so Python and SQL agree on what is a number.
INTEGER_PATTERN = r"-?[0-9]{1,18}"
_INTEGER = re.compile(INTEGER_PATTERN)


def _int_or_none(value: str | None) -> int | None:
    if value is None or not _INTEGER.fullmatch(value):
        return None
    return int(value)


# The rule for "a cleanup task Polaris never runs", on the text of ``data`` alone,
# so that Python and PostgreSQL (which has no error-free JSON parse before 16, and
# where a failing cast would abort the whole lease statement) decide it alike.
# ``data`` must start as Jackson writes an entity: compact JSON, only scalar
# members (numbers, strings without \u escapes, literals) before ``typeCode``,
# whose value is an integer. Python's and PostgreSQL's regex engines read this
# pattern the same way (only [] classes, no \s, \d or look-around).
# No ":" before a letter or digit: SQLAlchemy's text() would read ":0" as a parameter.
_JSON_INT = r"-?(?:[1-9][0-9]*|0)"
_JSON_SCALAR = rf'(?:{_JSON_INT}|"(?:[^"\\]|\\["\\/bfnrt])*"|true|false|null)'
UNHANDLED_DATA_PATTERN = rf'^\{{(?:"[A-Za-z]+":{_JSON_SCALAR},)*"typeCode":({_JSON_INT})[,}}]'
UNHANDLED_TYPE_KEY = '"typeCode"'
# A Polaris table cleanup names its children ``<parent>_<what>_<uuid>``, the parent
# ``entityCleanup_<entity id>`` and the UUID in Java's ``UUID.toString`` form.
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
CHILD_NAME_PATTERN = rf"^(entityCleanup_[0-9]+)_.*_{_UUID}$"
# The dropped entity's catalogId, read the same way (Jackson writes it first): the
# hold rule's catalog, in Python and in PostgreSQL alike.
CATALOG_ID_DATA_PATTERN = rf'^\{{(?:"[A-Za-z]+":{_JSON_SCALAR},)*"catalogId":({_JSON_INT})[,}}]'
# The dropped entity's kind, name and namespace, read the same way, for its drop
# event (``tasks/hold.py``): its subTypeCode; its name, only without a JSON escape;
# its ``parent-namespace`` inside the ``internalProperties`` text, levels joined by
# ``%1F`` with no other %-escape (``+`` is a space). A payload they cannot read
# plainly, or that names one of ``DROP_KEYS`` twice, matches no event.
_MEMBERS = rf'(?:"[A-Za-z]+":{_JSON_SCALAR},)*'
DROP_SUB_TYPE_DATA_PATTERN = rf'^\{{{_MEMBERS}"subTypeCode":({_JSON_INT})[,}}]'
DROP_NAME_DATA_PATTERN = rf'^\{{{_MEMBERS}"name":"([^"\\]+)"[,}}]'
DROP_NAMESPACE_DATA_PATTERN = (
    rf'^\{{{_MEMBERS}"internalProperties":"(?:[^"\\]|\\["\\/bfnrt])*'
    r'[{,]\\"parent-namespace\\":\\"([^"\\%]*(?:%1F[^"\\%]*)*)\\"[,}]'
)
DROP_KEYS = ('"subTypeCode":', '"name":', '"internalProperties":', "parent-namespace")
NAMESPACE_LEVEL_SEPARATOR = "%1F"
# Polaris's drop events by the dropped entity's subTypeCode (``leaks/drops.py``).
DROP_TABLE_EVENT = "AFTER_DROP_TABLE"
DROP_VIEW_EVENT = "AFTER_DROP_VIEW"
DROP_EVENT_BY_SUB_TYPE = {
    str(ICEBERG_TABLE_SUB_TYPE): DROP_TABLE_EVENT,
    str(ICEBERG_VIEW_SUB_TYPE): DROP_VIEW_EVENT,
}
_UNHANDLED_DATA = re.compile(UNHANDLED_DATA_PATTERN)
UNHANDLED_TASK_TYPE = "1"  # ENTITY_CLEANUP_SCHEDULER, exactly as Polaris writes it


def attempt_count_of(properties: Mapping[str, str]) -> int:
    """The ``attemptCount`` of ``properties``: 0 when absent or not a non-negative integer."""
    return max(0, _int_or_none(properties.get(Prop.ATTEMPT_COUNT)) or 0)


def start_time_of(properties: Mapping[str, str]) -> int | None:
    """The ``lastAttemptStartTime`` of ``properties``: None when absent or not an integer."""
    return _int_or_none(properties.get(Prop.START_TIME))


def is_unhandled_cleanup(task_type: str | None, data: str | None) -> bool:
    """Whether a task is an ENTITY_CLEANUP_SCHEDULER for an entity that is not TABLE_LIKE.

    Deliberately conservative (``metastore.predicates.UNHANDLED`` is the same rule
    in SQL): any doubt about which ``typeCode`` a JSON reader would see (a second
    ``"typeCode"`` anywhere, a ``\\u`` escape that could spell one, data not
    ending in ``}``, non-compact JSON, a string or fractional value) leaves the task
    to the normal path, where the payload decoder decides. A real table's task is
    therefore never unhandled: its typeCode is 7.
    """
    if task_type != UNHANDLED_TASK_TYPE or data is None or not data.endswith("}"):
        return False
    match = _UNHANDLED_DATA.match(data)
    if match is None or match.group(1) == str(TABLE_LIKE_TYPE_CODE):
        return False
    first = data.find(UNHANDLED_TYPE_KEY)
    if data.find(UNHANDLED_TYPE_KEY, first + len(UNHANDLED_TYPE_KEY)) != -1:
        return False
    return "\\u" not in data


def parse_properties(raw: Any, *, column: str) -> dict[str, str]:
    """Decode a ``properties``-like column into a string map, or raise PayloadError."""
    value = raw
    if isinstance(raw, (bytes, bytearray)):
        value = bytes(raw).decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise PayloadError(f"{column} is not JSON ({exc.msg} at char {exc.pos})") from None
        except (ValueError, RecursionError):
            raise PayloadError(
                f"{column} is not usable JSON (too deeply nested or invalid)"
            ) from None
    if not isinstance(value, Mapping):
        raise PayloadError(f"{column} is not a JSON object (found {type(value).__name__})")
    out: dict[str, str] = {}
    for key, val in value.items():
        if val is None:
            continue
        out[str(key)] = val if isinstance(val, str) else json.dumps(val)
    return out


@dataclass(frozen=True)
class TaskRow:
    """One TASK entity as read from ``entities``.

    ``properties`` is the decoded map, or empty with ``properties_error`` set
    when the column could not be decoded (the row still lists and can fail).
    """

    realm_id: str
    id: int
    name: str
    entity_version: int
    grant_records_version: int
    create_timestamp: int
    last_update_timestamp: int
    properties: dict[str, str] = field(default_factory=dict)
    internal_properties: dict[str, str] = field(default_factory=dict)
    properties_error: str | None = None
    catalog_id: int = 0
    parent_id: int = 0
    # When the task's hold ends (``tasks/hold.py``), set by the store that judged the
    # row with its catalog and parent; None: no hold.
    held_until_ms: int | None = None
    # The drop time that hold counts from, and where it came from; None: no hold.
    dropped_at_ms: int | None = None
    drop_time_source: DropTimeSource | None = None

    @property
    def label(self) -> str:
        return f"{self.realm_id}/{self.id} {self.name!r}"

    @property
    def executor_id(self) -> str | None:
        return self.properties.get(Prop.EXECUTOR) or None

    @property
    def start_time_ms(self) -> int | None:
        return start_time_of(self.properties)

    @property
    def attempt_count(self) -> int:
        return attempt_count_of(self.properties)

    @property
    def next_attempt_ms(self) -> int | None:
        return _int_or_none(self.properties.get(Prop.NEXT_ATTEMPT))

    @property
    def status(self) -> str | None:
        return self.properties.get(Prop.STATUS)

    @property
    def last_error(self) -> str | None:
        return self.properties.get(Prop.ERROR)

    @property
    def failure_permanent(self) -> bool:
        """The last failure was one retrying cannot heal (dead-lettered at once)."""
        return self.properties.get(Prop.PERMANENT) == PERMANENT_TRUE

    @property
    def shared_location_allowed(self) -> bool:
        """An operator let this task's purge go on despite a live entity sharing its location."""
        return self.properties.get(Prop.ALLOW_SHARED_LOCATION) == PERMANENT_TRUE

    @property
    def unhandled(self) -> bool:
        """A cleanup task Polaris never runs (see ``is_unhandled_cleanup``)."""
        if self.properties_error:
            return False
        return is_unhandled_cleanup(
            self.properties.get(Prop.TASK_TYPE), self.properties.get(Prop.DATA)
        )

    @property
    def created_by_us(self) -> bool:
        return self.properties.get(Prop.CREATED_BY) == CREATOR

    @property
    def task_type_code(self) -> str | None:
        return self.properties.get(Prop.TASK_TYPE)

    def task_type(self) -> TaskType:
        """The task's type, or PayloadError naming the task."""
        if self.properties_error:
            raise PayloadError(self.properties_error, task=self.label)
        code = self.properties.get(Prop.TASK_TYPE)
        if code is None and Prop.ORIGINAL in self.properties:
            raise PayloadError(
                f"properties were not a JSON object; the original is kept in {Prop.ORIGINAL}",
                task=self.label,
            )
        if code is None:
            raise PayloadError("properties have no taskType", task=self.label)
        kind = TaskType.of_code(code)
        if kind is None:
            raise PayloadError(f"unknown taskType {code[:40]!r}", task=self.label)
        return kind

    def data(self) -> str:
        """The raw ``data`` payload, or PayloadError naming the task."""
        if self.properties_error:
            raise PayloadError(self.properties_error, task=self.label)
        data = self.properties.get(Prop.DATA)
        if data is None:
            raise PayloadError("properties have no data", task=self.label)
        return data

    @property
    def end_time_ms(self) -> int | None:
        return _int_or_none(self.properties.get(Prop.END_TIME))

    @property
    def lease_released(self) -> bool:
        """The holder wrote its attempt's end, so the lease is over before it expires."""
        start, end = self.start_time_ms, self.end_time_ms
        return start is not None and end is not None and end >= start

    def lease_held(self, now_ms: int, policy: TaskPolicy) -> bool:
        # Polaris's rule: a lease expires when it has no start time, or one older than
        # the realm's lease timeout.
        start = self.start_time_ms
        return (
            self.executor_id is not None
            and start is not None
            and now_ms - start <= policy.for_realm(self.realm_id).lease_timeout_ms
            and not self.lease_released
        )

    def state(self, now_ms: int, policy: TaskPolicy, held_until_ms: int | None = None) -> TaskState:
        """The state at ``now_ms`` (database clock) under the realm's policy.

        Mirrors ``metastore.predicates``. Unhandled comes first: it depends on the
        payload alone, which never changes, so such a task is never leased, and one
        an older version dead-lettered no longer counts as dead. ``held_until_ms``:
        the end of the task's hold (``tasks/hold.py``; default: the row's own); a hold
        never outranks dead, leased or backing off: it only keeps a task from being
        taken.
        """
        if held_until_ms is None:
            held_until_ms = self.held_until_ms
        if self.unhandled:
            return TaskState.UNHANDLED
        policy = policy.for_realm(self.realm_id)
        if self.status == STATUS_DEAD:
            return TaskState.DEAD
        if self.lease_held(now_ms, policy):
            return TaskState.LEASED
        if self.attempt_count >= policy.max_attempts:
            return TaskState.DEAD
        next_attempt = self.next_attempt_ms
        if next_attempt is not None and next_attempt > now_ms:
            return TaskState.BACKING_OFF
        if held_until_ms is not None and now_ms < held_until_ms:
            return TaskState.HELD
        if (
            self.executor_id is None
            and not self.created_by_us
            and now_ms - self.create_timestamp < policy.effective_grace_ms
        ):
            return TaskState.PENDING
        return TaskState.ORPHANED


@dataclass(frozen=True)
class NewTask:
    """A task to insert (children of table cleanup, tests, the demo)."""

    realm_id: str
    id: int
    name: str
    properties: dict[str, str]
    internal_properties: dict[str, str]
    create_timestamp: int | None = None  # None: the database clock at insert


_LONG_RUN = re.compile(r"\S{161,}")


def _abbreviate(match: re.Match[str]) -> str:
    run = match.group(0)
    return f"{run[:100]}…[{len(run) - 150} chars]…{run[-50:]}"


def bounded_error(message: str) -> str:
    """Bound an error text so a hostile payload cannot bloat the row.

    Very long words (paths, payload fragments) are abbreviated first, so the
    cause that follows them is not cut off by the bound.
    """
    text = _LONG_RUN.sub(_abbreviate, message.replace("\x00", "\\0"))
    if len(text) <= MAX_ERROR_LENGTH:
        return text
    return text[: MAX_ERROR_LENGTH - 15] + "... [truncated]"
