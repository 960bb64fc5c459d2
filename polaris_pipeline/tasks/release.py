"""Which Polaris release reads the rows we write, and what that release decides.

Polaris never migrates its schema (``/work/shared/polaris-task-model.md`` §1): a 1.7
server upgraded from 1.4 runs on a v4 database for ever. So the BATCH payload's ``type``
and task events are decided from a ``PolarisRelease``; the schema version only bounds it
from below. Unconfigured, ``infer`` decides per realm from Polaris's own BATCH rows (§4)
and the schema version (``metastore/release_probe.py`` reads the evidence).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

_PATTERN = re.compile(r"^(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?(?:-incubating)?$")


@dataclass(frozen=True, order=True)
class PolarisRelease:
    """A Polaris release, ``1.7`` or ``1.4.1``; compared by number."""

    major: int
    minor: int
    patch: int = 0

    @classmethod
    def parse(cls, raw: str) -> PolarisRelease:
        """``1.7``, ``1.4.1`` or ``1.0.0-incubating``; a ValueError saying what is expected."""
        text = raw.strip() if isinstance(raw, str) else ""
        match = _PATTERN.fullmatch(text)
        if match is None:
            raise ValueError(f"{str(raw)[:40]!r} is not a Polaris release (e.g. 1.7 or 1.4.1)")
        release = cls(int(match[1]), int(match[2]), int(match[3] or 0))
        if release < FIRST_RELEASE:
            # Before 1.0 Polaris had no relational JDBC persistence: nothing of ours reads it.
            raise ValueError(f"Polaris {release} is not supported (1.0 or later)")
        return release

    @classmethod
    def normalise(cls, raw: str) -> str:
        """``raw`` checked and written as ``str`` writes it (for settings kept as text)."""
        return str(cls.parse(raw))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}" + (f".{self.patch}" if self.patch else "")

    # -- what the release decides ----------------------------------------------------

    @property
    def batch_has_type(self) -> bool:
        """BATCH_FILE_CLEANUP ``data`` carries ``type``: 1.7+ need it, 1.0-1.6 refuse it."""
        return self >= BATCH_TYPE_SINCE

    @property
    def writes_task_events(self) -> bool:
        """Polaris persists BEFORE/AFTER_ATTEMPT_TASK events (1.6.0 and later)."""
        return self >= TASK_EVENTS_SINCE

    def event_catalog_id(self, schema_version: int | None) -> str | None:
        """The ``catalog_id`` of a realm-scoped event: NULL only for 1.7+ on schema v5+.

        1.6 writes ``__realm__`` on any schema; 1.7+ below v5, where the column is NOT
        NULL. No version row: the sentinel, which every reader takes as NULL.
        """
        null_catalog = (
            self >= NULL_EVENT_CATALOG_SINCE
            and schema_version is not None
            and schema_version >= NULL_EVENT_CATALOG_SINCE_SCHEMA
        )
        return None if null_catalog else LEGACY_REALM_SCOPED_CATALOG_ID


# The releases whose own classes judge the rows we write (tests/polaris/releases,
# docs/polaris-compatibility.md; a test holds the two lists equal).
TESTED_RELEASES = (
    PolarisRelease(1, 0),
    PolarisRelease(1, 4, 1),
    PolarisRelease(1, 6),
    PolarisRelease(1, 7),
)


def untested_warning(release: PolarisRelease) -> str | None:
    """What to tell an operator who names a release past the newest tested line
    (its major.minor), or None: the rows follow the newest rules we know, unverified."""
    newest = max(TESTED_RELEASES)
    if (release.major, release.minor) <= (newest.major, newest.minor):
        return None
    tested = ", ".join(str(r) for r in TESTED_RELEASES)
    return (
        f"Polaris {release} is newer than the releases tested ({tested}): the rows written "
        f"follow {newest}'s rules, which {release} may have changed"
    )


FIRST_RELEASE = PolarisRelease(1, 0)
BATCH_TYPE_SINCE = PolarisRelease(1, 7)
TASK_EVENTS_SINCE = PolarisRelease(1, 6)
NULL_EVENT_CATALOG_SINCE = PolarisRelease(1, 7)
NULL_EVENT_CATALOG_SINCE_SCHEMA = 5
# ModelEvent.LEGACY_REALM_SCOPED_CATALOG_ID: a realm-scoped event's catalog below v5.
LEGACY_REALM_SCOPED_CATALOG_ID = "__realm__"

# The first release whose bootstrap writes each schema version: a database of that
# version was created by this release or a later one.
RELEASE_FLOOR_BY_SCHEMA: dict[int, PolarisRelease] = {
    1: PolarisRelease(1, 0),
    2: PolarisRelease(1, 1),
    3: PolarisRelease(1, 2),
    4: PolarisRelease(1, 4),
    5: PolarisRelease(1, 7),
}


def schema_floor(schema_version: int | None) -> PolarisRelease:
    """The oldest release that can own a database of ``schema_version``.

    No version row (or a version older than we know): 1.0, the safest reading.
    A newer version than we know: at least the newest floor.
    """
    if schema_version is None or schema_version < min(RELEASE_FLOOR_BY_SCHEMA):
        return FIRST_RELEASE
    known = max(v for v in RELEASE_FLOOR_BY_SCHEMA if v <= schema_version)
    return RELEASE_FLOOR_BY_SCHEMA[known]


class ReleaseSource(StrEnum):
    CONFIGURED = "configured"  # the setting (or the realm's override): exact
    BATCH_ROWS = "batch-rows"  # the shape of BATCH rows Polaris wrote
    SCHEMA_VERSION = "schema-version"  # the version row: a lower bound only


@dataclass(frozen=True)
class BatchEvidence:
    """What the BATCH rows Polaris wrote in one realm say (ours are not evidence)."""

    # A row with ``type``: only 1.7+ writes one, so 1.7+ runs now (Polaris only
    # moves forward; older rows without it may be orphans of the release before).
    typed_task_id: int | None = None
    # The newest row without ``type``, when none has it: a release before 1.7 wrote it.
    untyped_task_id: int | None = None


@dataclass(frozen=True)
class ResolvedRelease:
    """The release one realm's rows are written for, and why."""

    realm_id: str
    release: PolarisRelease
    source: ReleaseSource
    schema_version: int | None
    evidence: str
    # True when only a lower bound is known (the schema version's floor, or rows of 1.7+).
    at_least: bool = False

    @property
    def text(self) -> str:
        """``POLARIS: 1.7+ (BATCH task 42 has type)``: for log lines."""
        plus = "+" if self.at_least else ""
        return f"{self.realm_id}: Polaris {self.release}{plus} ({self.evidence})"

    def to_json(self) -> dict[str, Any]:
        return {
            "release": str(self.release),
            "at_least": self.at_least,
            "source": self.source.value,
            "schema_version": self.schema_version,
            "evidence": self.evidence,
        }


def _schema_text(schema_version: int | None) -> str:
    return "no version row" if schema_version is None else f"schema v{schema_version}"


def configured(
    realm_id: str, release: PolarisRelease, schema_version: int | None, *, for_realm: bool = False
) -> ResolvedRelease:
    """The release the operator named for ``realm_id`` (``for_realm``: its own override)."""
    # The setting's name, not one door's: the environment, a YAML block or --set may set it.
    where = "configured for the realm" if for_realm else "configured (metastore.polaris_version)"
    return ResolvedRelease(realm_id, release, ReleaseSource.CONFIGURED, schema_version, where)


def infer(realm_id: str, schema_version: int | None, batch: BatchEvidence) -> ResolvedRelease:
    """The release of ``realm_id`` from what its rows say, when none is configured.

    A BATCH row of Polaris's with ``type``: 1.7 or later. One without it (and none
    with): a release before 1.7, the schema version's floor. No such row: the floor,
    a lower bound (on v4, 1.4: no ``type``; on v5, 1.7+). Where the two disagree the
    schema wins: only 1.7+ creates a v5 database, so an untyped row there is not
    the running release's.
    """
    floor = schema_floor(schema_version)
    schema = _schema_text(schema_version)
    release, source = floor, ReleaseSource.BATCH_ROWS
    if batch.typed_task_id is not None:
        release = max(floor, BATCH_TYPE_SINCE)
        evidence = f"BATCH task {batch.typed_task_id} written by Polaris has type; {schema}"
    elif batch.untyped_task_id is not None and floor < BATCH_TYPE_SINCE:
        evidence = (
            f"BATCH task {batch.untyped_task_id} written by Polaris has no type: before "
            f"{BATCH_TYPE_SINCE}; {schema}"
        )
    elif batch.untyped_task_id is not None:
        source = ReleaseSource.SCHEMA_VERSION
        evidence = (
            f"{schema}; BATCH task {batch.untyped_task_id} without type ignored: only "
            f"{floor}+ creates {schema}"
        )
    else:
        source = ReleaseSource.SCHEMA_VERSION
        evidence = f"{schema}, no BATCH task written by Polaris"
    return ResolvedRelease(realm_id, release, source, schema_version, evidence, True)


def batch_evidence(rows: list[tuple[int, str | None]]) -> BatchEvidence:
    """What (task id, ``data``) of BATCH rows Polaris wrote say about its release.

    A row is typed when its ``data`` decodes to an object with a top-level ``type``;
    a row whose ``data`` does not decode says nothing.
    """
    typed: int | None = None
    untyped: int | None = None
    for task_id, data in rows:
        try:
            doc = json.loads(data) if data is not None else None
        except (ValueError, RecursionError):
            continue
        if not isinstance(doc, dict) or "batchFiles" not in doc:
            continue
        if "type" in doc:
            typed = task_id if typed is None else typed
        elif untyped is None:
            untyped = task_id
    return BatchEvidence(typed, untyped)


# The task-events setting: off, on (as the realm's release writes them), or "always"
# (on whatever the release, for releases before 1.6 too).
ALWAYS: Literal["always"] = "always"
TaskEvents = bool | Literal["always"]


def parse_task_events(raw: object) -> TaskEvents:
    """``true``/``false`` (and yes/no, on/off, 1/0) or ``always``; ValueError otherwise."""
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value == ALWAYS:
        return ALWAYS
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"task events must be true, false or {ALWAYS}, not {raw!r}")
