"""The task model: Polaris TASK rows, their types, and the states derived from them.

A state is always computed from a row and the database clock, never stored as a
second source of truth. The same rule is written once more as SQL in
``metastore.predicates``; a test holds the two in agreement.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.settings.metastore import MetastoreSection
from polaris_pipeline.settings.realm import (
    RealmOverride,
    check_batch_size,
    check_lease_timing,
    check_max_attempts,
    hold_days_ms,
    release_text,
)
from polaris_pipeline.tasks.release import TaskEvents, parse_task_events
from polaris_pipeline.unreferenced.mode import UnreferencedMode

# Where the policy's defaults are declared: a default TaskPolicy is the default section's.
_SECTION = MetastoreSection()
_DEFAULT_UNREFERENCED = UnreferencedMode.parse(_SECTION.unreferenced)
_DEFAULT_TASK_EVENTS = parse_task_events(_SECTION.task_events)
_DEFAULT_HOLD_MS = hold_days_ms(_SECTION.hold_days)

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


@dataclass(frozen=True)
class TaskPolicy:
    """How the realms' tasks are run: the metastore section resolved (``from_section``), in the
    engine's units. Defaults are the section's (``settings/metastore.py``); only the backoff,
    which no setting changes, is declared here. ``for_realm`` applies ``realm_overrides``;
    the state rule and the lease statement apply it per row.
    """

    lease_timeout_ms: int = _SECTION.lease_timeout_ms
    grace_ms: int | None = _SECTION.grace_ms  # None: the lease timeout
    max_attempts: int = _SECTION.max_attempts
    backoff_base_ms: int = 30_000
    backoff_max_ms: int = 3_600_000
    metadata_batch_size: int = _SECTION.metadata_batch_size
    # Part of the policy so that every Runner (CLI, task job, realm backfill) reads the
    # deployment's mode from the one object they are all built with.
    unreferenced: UnreferencedMode = _DEFAULT_UNREFERENCED
    # None: inferred per realm (``metastore/release_probe.py``). Text, as the settings
    # write it.
    polaris_version: str | None = _SECTION.polaris_version
    task_events: TaskEvents = _DEFAULT_TASK_EVENTS
    realm_overrides: Mapping[str, RealmOverride] = field(default_factory=dict, hash=False)
    hold_ms: int = _DEFAULT_HOLD_MS
    # Catalog name -> its own hold, in every realm; beats the realm's.
    catalog_hold_ms: Mapping[str, int] = field(default_factory=dict, hash=False)

    @classmethod
    def from_section(cls, section: MetastoreSection) -> TaskPolicy:
        """The policy ``section`` gives: every Metastore and Runner is built with it."""
        return cls(
            lease_timeout_ms=section.lease_timeout_ms,
            grace_ms=section.grace_ms,
            max_attempts=section.max_attempts,
            metadata_batch_size=section.metadata_batch_size,
            unreferenced=UnreferencedMode.parse(section.unreferenced),
            polaris_version=section.polaris_version,
            task_events=parse_task_events(section.task_events),
            hold_ms=hold_days_ms(section.hold_days),
            catalog_hold_ms={c: hold_days_ms(d) for c, d in section.catalog_hold_days.items()},
            realm_overrides={
                # A plain RealmOverride whatever subclass the section holds (the resource's).
                realm: RealmOverride(**o.model_dump(exclude_none=True))
                for realm, o in section.realm_overrides.items()
            },
        )

    def __post_init__(self) -> None:
        check_lease_timing(self.lease_timeout_ms, self.grace_ms)
        if self.polaris_version is not None:
            object.__setattr__(self, "polaris_version", release_text(self.polaris_version))
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
_MEMBERS = rf'(?:"[A-Za-z]+":{_JSON_SCALAR},)*'
UNHANDLED_DATA_PATTERN = rf'^\{{{_MEMBERS}"typeCode":({_JSON_INT})[,}}]'
UNHANDLED_TYPE_KEY = '"typeCode"'
# A Polaris table cleanup names its children ``<parent>_<what>_<uuid>``, the parent
# ``entityCleanup_<entity id>`` and the UUID in Java's ``UUID.toString`` form.
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
CHILD_NAME_PATTERN = rf"^(entityCleanup_[0-9]+)_.*_{_UUID}$"
# The dropped entity's catalogId, read the same way (Jackson writes it first): the
# hold rule's catalog, in Python and in PostgreSQL alike.
CATALOG_ID_DATA_PATTERN = rf'^\{{{_MEMBERS}"catalogId":({_JSON_INT})[,}}]'
# The dropped entity's kind, name and namespace, read the same way, for its drop
# event (``tasks/hold.py``): its subTypeCode; its name, only without a JSON escape;
# its ``parent-namespace`` inside the ``internalProperties`` text, levels joined by
# ``%1F`` with no other %-escape (``+`` is a space). A payload they cannot read
# plainly, or that names one of ``DROP_KEYS`` twice, matches no event.
DROP_SUB_TYPE_DATA_PATTERN = rf'^\{{{_MEMBERS}"subTypeCode":({_JSON_INT})[,}}]'
DROP_NAME_DATA_PATTERN = rf'^\{{{_MEMBERS}"name":"([^"\\]+)"[,}}]'
DROP_NAMESPACE_DATA_PATTERN = (
    rf'^\{{{_MEMBERS}"internalProperties":"(?:[^"\\]|\\["\\/bfnrt])*'
    r'[{,]\\"parent-namespace\\":\\"([^"\\%]*(?:%1F[^"\\%]*)*)\\"[,}]'
)
DROP_KEYS = ('"subTypeCode":', '"name":', '"internalProperties":', "parent-namespace")
# Iceberg's RESTUtil joins namespace levels with the URL-encoded unit separator.
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

    Conservative, as its SQL twin ``metastore.predicates.UNHANDLED``: any doubt about the
    ``typeCode`` a JSON reader would see (a second ``"typeCode"``, a ``\\u`` escape, data not
    ending in ``}``, non-compact JSON, a string or fractional value) leaves the task to the
    payload decoder. A real table's task (typeCode 7) is never unhandled.
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
        """The state at ``now_ms`` (database clock) under the realm's policy (as ``predicates``).

        Unhandled first: it depends on the payload alone, so such a task is never leased and never
        counts as dead. ``held_until_ms``: the hold's end (``tasks/hold.py``); a hold never outranks
        dead, leased or backing off: it only keeps a task from being taken.
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
