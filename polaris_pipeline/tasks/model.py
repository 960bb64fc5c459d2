"""The task model: Polaris TASK rows, their types, and the states derived from them.

A state is always computed from a row and the database clock, never stored as a
second source of truth. The same rule is written once more as SQL in
``metastore.predicates``; a test holds the two in agreement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from polaris_pipeline.errors import PayloadError

TASK_TYPE_CODE = 8
TABLE_LIKE_TYPE_CODE = 7
ICEBERG_VIEW_SUB_TYPE = 3


class TaskType(IntEnum):
    """Polaris's ``AsyncTaskType`` codes, stored as the ``taskType`` property."""

    ENTITY_CLEANUP_SCHEDULER = 1
    MANIFEST_FILE_CLEANUP = 2
    BATCH_FILE_CLEANUP = 3


class TaskState(StrEnum):
    PENDING = "pending"  # never leased, within the grace period: Polaris may be running it
    ORPHANED = "orphaned"  # available to our sweeper
    LEASED = "leased"  # an executor holds an unexpired lease
    BACKING_OFF = "backing-off"  # last attempt failed; next attempt time in the future
    DEAD = "dead"  # dead-lettered; only an operator's requeue revives it


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
    CREATED_BY = "createdBy"  # "polaris-pipeline" on children we create: no grace period
    # The undecodable original of a row whose properties were not a JSON object,
    # kept when we lease it so that recording the failure loses nothing.
    ORIGINAL = "originalProperties"


STATUS_FAILED = "failed"
STATUS_DEAD = "dead"
STATUS_REQUEUED = "requeued"
CREATOR = "polaris-pipeline"
MAX_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class LeasePolicy:
    """Timing rules of leasing. Defaults match Polaris where Polaris has one."""

    lease_timeout_ms: int = 300_000  # POLARIS_TASK_TIMEOUT_MILLIS
    grace_ms: int | None = None  # None: the lease timeout
    max_attempts: int = 8
    backoff_base_ms: int = 30_000
    backoff_max_ms: int = 3_600_000

    def __post_init__(self) -> None:
        if self.lease_timeout_ms <= 0:
            raise ValueError("lease timeout must be positive")
        if self.grace_ms is not None and self.grace_ms < 0:
            raise ValueError("grace period must not be negative")
        if self.max_attempts < 1:
            raise ValueError("max attempts must be at least 1")
        if self.backoff_base_ms < 0 or self.backoff_max_ms < self.backoff_base_ms:
            raise ValueError("backoff bounds must satisfy 0 <= base <= max")

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

    @property
    def label(self) -> str:
        return f"{self.realm_id}/{self.id} {self.name!r}"

    @property
    def executor_id(self) -> str | None:
        return self.properties.get(Prop.EXECUTOR) or None

    @property
    def start_time_ms(self) -> int | None:
        return _int_or_none(self.properties.get(Prop.START_TIME))

    @property
    def attempt_count(self) -> int:
        return max(0, _int_or_none(self.properties.get(Prop.ATTEMPT_COUNT)) or 0)

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
        number = _int_or_none(code)
        if number is None or number not in TaskType._value2member_map_:
            raise PayloadError(f"unknown taskType {code[:40]!r}", task=self.label)
        return TaskType(number)

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

    def lease_expired(self, now_ms: int, policy: LeasePolicy) -> bool:
        """Polaris's rule: no start time, or older than the lease timeout."""
        start = self.start_time_ms
        return start is None or now_ms - start > policy.lease_timeout_ms

    @property
    def lease_released(self) -> bool:
        """The holder wrote its attempt's end, so the lease is over before it expires."""
        start, end = self.start_time_ms, self.end_time_ms
        return start is not None and end is not None and end >= start

    def lease_held(self, now_ms: int, policy: LeasePolicy) -> bool:
        return (
            self.executor_id is not None
            and not self.lease_expired(now_ms, policy)
            and not self.lease_released
        )

    def state(self, now_ms: int, policy: LeasePolicy) -> TaskState:
        """The state at ``now_ms`` (database clock). Mirrors ``metastore.predicates``."""
        if self.status == STATUS_DEAD:
            return TaskState.DEAD
        if self.lease_held(now_ms, policy):
            return TaskState.LEASED
        if self.attempt_count >= policy.max_attempts:
            return TaskState.DEAD
        next_attempt = self.next_attempt_ms
        if next_attempt is not None and next_attempt > now_ms:
            return TaskState.BACKING_OFF
        if (
            self.executor_id is None
            and not self.created_by_us
            and now_ms - self.create_timestamp < policy.effective_grace_ms
        ):
            return TaskState.PENDING
        return TaskState.ORPHANED


@dataclass(frozen=True)
class Lease:
    """A lease held on one task.

    ``executor_id`` plus ``attempt`` (the ``attemptCount`` the lease wrote) is
    the fencing token: every lease grant increments ``attemptCount``, so a
    later holder never matches an earlier one, even with the same executor id.
    """

    realm_id: str
    task_id: int
    executor_id: str
    attempt: int
    entity_version: int
    start_time_ms: int
    task_type_code: str | None = None
    name: str = ""

    @property
    def run_key(self) -> str:
        return f"{self.realm_id}:{self.task_id}:{self.attempt}"

    @property
    def label(self) -> str:
        return f"{self.realm_id}/{self.task_id} {self.name!r}"


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
