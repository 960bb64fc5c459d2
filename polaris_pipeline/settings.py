"""Every setting of the engine, read once from the environment, overridable by flags.

The command line and the Dagster code location both build a ``PipelineSettings``
from the same variables, so they cannot disagree on what is leased, what is
dead or which realms are swept. Each default is written once: the lease policy's
come from ``LeasePolicy`` itself, the others are the constants below.

Each variable, its field and its flag are listed once, in ``_SPECS`` (and for
operators in docs/dagster.md).

``POLARIS_PIPELINE_REALM_OVERRIDES`` is a JSON object of realm to its own values,
as Polaris lets a realm override its task timeout and metadata batch size:
``{"TEST": {"lease_timeout_ms": 60000, "metadata_batch_size": 5}}``; a realm's
``unreferenced`` mode and Polaris release too (``{"TEST": {"unreferenced": "delete",
"polaris_version": "1.7"}}``).

An unset or blank variable means the default. A bad value is a ``SettingsError``
naming the variable (or the flag) and what is wrong with it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.leaks.reclaim import MIN_AGE_FLOOR_DAYS
from polaris_pipeline.metastore.connection import URL_ENV
from polaris_pipeline.storage.config import CONFIG_ENV_VAR
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.model import LeasePolicy, RealmOverride
from polaris_pipeline.tasks.release import (
    RELEASE_ENV,
    PolarisRelease,
    TaskEvents,
    parse_task_events,
)
from polaris_pipeline.tasks.unreferenced_mode import DEFAULT_UNREFERENCED_MODE, UnreferencedMode

REALMS_ENV = "POLARIS_PIPELINE_REALMS"
LEASE_TIMEOUT_ENV = "POLARIS_PIPELINE_LEASE_TIMEOUT_MS"
GRACE_ENV = "POLARIS_PIPELINE_GRACE_MS"
MAX_ATTEMPTS_ENV = "POLARIS_PIPELINE_MAX_ATTEMPTS"
UNREFERENCED_ENV = "POLARIS_PIPELINE_UNREFERENCED"
DELETION_RECORD_ENV = "POLARIS_PIPELINE_DELETION_RECORD"

# The sweeper sensor's cadence and bounds, and the backlog check's threshold.
DEFAULT_SWEEP_INTERVAL_S = 60.0
DEFAULT_SWEEP_JITTER = 0.2
DEFAULT_SWEEP_MAX_RUNS = 200
DEFAULT_SWEEP_MAX_PENDING_RUNS = 400
DEFAULT_MAX_ORPHAN_AGE_S = 3600.0
# The run retention job (polaris_pipeline.dagster.retention): runs deleted per tick, when.
DEFAULT_RETENTION_BATCH_SIZE = 1000
DEFAULT_RETENTION_CRON = "0 * * * *"
# The leak report (polaris_pipeline.leaks): its check's threshold, its schedule (off by
# default: it lists whole catalogs), and the youngest object a reclaim deletes. Below a
# day a reclaim could race a writer (a table being created at the root) and is refused.
DEFAULT_LEAK_MAX_BYTES = 0
DEFAULT_LEAK_CRON = "0 4 * * 0"
DEFAULT_LEAK_MIN_AGE_DAYS = 7.0
LEAK_MIN_AGE_ENV = "POLARIS_PIPELINE_LEAK_MIN_AGE_DAYS"

_POLICY = LeasePolicy()


class SettingsError(PolarisPipelineError, ValueError):
    """A setting has a bad value; the message names its variable or flag."""


def _text(raw: str) -> str:
    return raw.strip()


def _integer(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError("not an integer") from None


def _number(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError("not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("not a finite number")
    return value


def _boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError("not a boolean (true or false)")


def _realm_list(raw: str) -> tuple[str, ...]:
    realms = tuple(dict.fromkeys(r.strip() for r in raw.split(",") if r.strip()))
    if not realms:
        raise ValueError("names no realm (a comma-separated list, e.g. POLARIS,TEST)")
    return realms


def _realm_overrides(raw: str) -> dict[str, RealmOverride]:
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError('not JSON (e.g. {"TEST": {"lease_timeout_ms": 60000}})') from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object of realm to overrides")
    return {
        str(realm): RealmOverride.from_json_obj(v, realm=str(realm)) for realm, v in value.items()
    }


def _policy_field(name: str) -> Callable[[Any], None]:
    # LeasePolicy holds the rule; building one with only this field applies it.
    def check(value: Any) -> None:
        LeasePolicy(**{name: value})

    return check


def _at_least(bound: float, what: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < bound:
            raise ValueError(f"{what} must be at least {bound:g}")

    return check


def _orphan_age(value: Any) -> None:
    if value <= 0:
        raise ValueError("the maximum orphan age must be positive")


def _jitter(value: Any) -> None:
    if not 0 <= value <= 10:
        raise ValueError("the jitter is a fraction of the interval between 0 and 10")


def _executor_prefix(value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("the executor prefix must not be empty")
    if any(c.isspace() for c in value):
        raise ValueError("the executor prefix must not contain white space")


def _nonblank_cron(value: Any) -> None:
    # Dagster checks the expression itself when it builds the schedule.
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a schedule must be a cron expression")


def _record_prefix(value: Any) -> None:
    # Checked when read, not at the first delete: a typo would otherwise fail
    # every attempt of a sweep, one by one.
    if not isinstance(value, str) or not value.strip():
        raise ValueError("the deletion record prefix must not be empty")
    scheme, rest = split_uri(value.strip())
    if not scheme or not rest.strip("/"):
        raise ValueError(
            "not an fsspec URI prefix or absolute path "
            "(e.g. s3://audit/polaris-pipeline/ or file:///var/log/pp/)"
        )


def _realms_check(value: Any) -> None:
    if isinstance(value, str) or not all(isinstance(r, str) and r.strip() for r in value):
        raise ValueError("each realm must be a non-empty name")


@dataclass(frozen=True)
class _Spec:
    env: str
    flag: str | None
    parse: Callable[[str], Any]
    check: Callable[[Any], object] | None = None  # raises on a bad value


_SPECS: dict[str, _Spec] = {
    "metastore_url": _Spec(URL_ENV, "--metastore", _text),
    "realms": _Spec(REALMS_ENV, "--realm", _realm_list, _realms_check),
    "lease_timeout_ms": _Spec(
        LEASE_TIMEOUT_ENV, "--lease-timeout-ms", _integer, _policy_field("lease_timeout_ms")
    ),
    "grace_ms": _Spec(GRACE_ENV, "--grace-ms", _integer, _policy_field("grace_ms")),
    "max_attempts": _Spec(
        MAX_ATTEMPTS_ENV, "--max-attempts", _integer, _policy_field("max_attempts")
    ),
    "metadata_batch_size": _Spec(
        "POLARIS_PIPELINE_METADATA_BATCH_SIZE", None, _integer, _policy_field("metadata_batch_size")
    ),
    "realm_overrides": _Spec(
        "POLARIS_PIPELINE_REALM_OVERRIDES", None, _realm_overrides, _policy_field("realm_overrides")
    ),
    "polaris_version": _Spec(
        RELEASE_ENV, "--polaris-version", PolarisRelease.normalise, _policy_field("polaris_version")
    ),
    "storage_config": _Spec(CONFIG_ENV_VAR, "--storage-config", _text),
    "executor_prefix": _Spec("POLARIS_PIPELINE_EXECUTOR_PREFIX", None, _text, _executor_prefix),
    "sweep_interval_s": _Spec(
        "POLARIS_PIPELINE_SWEEP_INTERVAL_S", None, _number, _at_least(0, "the sweep interval")
    ),
    "sweep_jitter": _Spec("POLARIS_PIPELINE_SWEEP_JITTER", None, _number, _jitter),
    "sweep_max_runs": _Spec(
        "POLARIS_PIPELINE_SWEEP_MAX_RUNS", None, _integer, _at_least(1, "the runs per tick")
    ),
    "sweep_max_pending_runs": _Spec(
        "POLARIS_PIPELINE_SWEEP_MAX_PENDING_RUNS", None, _integer, _at_least(1, "the pending runs")
    ),
    "max_orphan_age_s": _Spec("POLARIS_PIPELINE_MAX_ORPHAN_AGE_S", None, _number, _orphan_age),
    "sweeper_autostart": _Spec("POLARIS_PIPELINE_SWEEPER_AUTOSTART", None, _boolean),
    "task_events": _Spec("POLARIS_PIPELINE_TASK_EVENTS", None, parse_task_events),
    "deletion_record": _Spec(DELETION_RECORD_ENV, "--deletion-record", _text, _record_prefix),
    "unreferenced": _Spec(
        UNREFERENCED_ENV, "--unreferenced", UnreferencedMode.parse, UnreferencedMode.parse
    ),
    "retention_success_days": _Spec(
        "POLARIS_PIPELINE_RETENTION_SUCCESS_DAYS",
        None,
        _integer,
        _at_least(1, "the days a success is kept"),
    ),
    "retention_failure_days": _Spec(
        "POLARIS_PIPELINE_RETENTION_FAILURE_DAYS",
        None,
        _integer,
        _at_least(1, "the days a failure is kept"),
    ),
    "retention_batch_size": _Spec(
        "POLARIS_PIPELINE_RETENTION_BATCH_SIZE",
        None,
        _integer,
        _at_least(1, "the runs deleted per tick"),
    ),
    "retention_dry_run": _Spec("POLARIS_PIPELINE_RETENTION_DRY_RUN", None, _boolean),
    "retention_cron": _Spec("POLARIS_PIPELINE_RETENTION_CRON", None, _text, _nonblank_cron),
    "leak_max_bytes": _Spec(
        "POLARIS_PIPELINE_LEAK_MAX_BYTES", None, _integer, _at_least(0, "the leaked bytes")
    ),
    "leak_cron": _Spec("POLARIS_PIPELINE_LEAK_CRON", None, _text, _nonblank_cron),
    "leak_min_age_days": _Spec(
        LEAK_MIN_AGE_ENV,
        "--min-age-days",
        _number,
        _at_least(MIN_AGE_FLOOR_DAYS, "a reclaim's minimum age in days"),
    ),
    "leak_auto_reclaim_catalogs": _Spec(
        "POLARIS_PIPELINE_LEAK_AUTO_RECLAIM_CATALOGS",
        None,
        lambda raw: tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip())),
    ),
}


@dataclass(frozen=True)
class PipelineSettings:
    """What the engine, the CLI and the code location are configured with."""

    # None: no URL configured; commands that need one say so.
    metastore_url: str | None = None
    # None: every realm that has tasks.
    realms: tuple[str, ...] | None = None
    lease_timeout_ms: int = _POLICY.lease_timeout_ms
    grace_ms: int | None = _POLICY.grace_ms
    max_attempts: int = _POLICY.max_attempts
    # Polaris's TABLE_METADATA_CLEANUP_BATCH_SIZE: metadata files per batch child.
    metadata_batch_size: int = _POLICY.metadata_batch_size
    # The Polaris release that reads the rows we write (``1.7``, ``1.4.1``); None:
    # inferred per realm from the rows Polaris wrote and the schema version.
    polaris_version: str | None = None
    # Realm -> its own lease timeout, grace period, metadata batch size, release.
    realm_overrides: Mapping[str, RealmOverride] = field(default_factory=dict)
    # None: no storage config file (no location rules, no allowed prefixes).
    storage_config: str | None = None
    # None: the runner's own prefix (``runner.DEFAULT_EXECUTOR_PREFIX``).
    executor_prefix: str | None = None
    sweep_interval_s: float = DEFAULT_SWEEP_INTERVAL_S
    sweep_jitter: float = DEFAULT_SWEEP_JITTER
    sweep_max_runs: int = DEFAULT_SWEEP_MAX_RUNS
    sweep_max_pending_runs: int = DEFAULT_SWEEP_MAX_PENDING_RUNS
    max_orphan_age_s: float = DEFAULT_MAX_ORPHAN_AGE_S
    # Whether the sweeper sensor starts by itself. None: yes, except under `dagster dev`
    # / `dg dev` (a development start pointed at a production metastore must not purge
    # by surprise); True or False: as said, wherever it runs.
    sweeper_autostart: bool | None = None
    # Write Polaris's BEFORE/AFTER_ATTEMPT_TASK rows to its events table (schema v3+),
    # where the realm's release writes them (1.6+); "always": for every release. Off
    # by default, as Polaris's own persistence listener is.
    task_events: TaskEvents = False
    # An fsspec URI prefix (s3://audit/polaris-pipeline/, file:///var/log/pp/) under
    # which every attempt that deletes anything writes the paths it deleted, one
    # JSON Lines file per attempt (storage/deletion_record.py). None: no record.
    deletion_record: str | None = None
    # What a dropped table's run does with the files its metadata no longer names:
    # off, report (list and record, delete nothing), delete. Realms may override it.
    unreferenced: UnreferencedMode = DEFAULT_UNREFERENCED_MODE
    # Run retention (the Dagster code location's retention job): days a finished run
    # of the task job is kept, by outcome. None: kept for ever; both None: job off.
    retention_success_days: int | None = None
    retention_failure_days: int | None = None
    retention_batch_size: int = DEFAULT_RETENTION_BATCH_SIZE
    retention_dry_run: bool = False
    retention_cron: str = DEFAULT_RETENTION_CRON
    # The leak report's check warns above this many leaked bytes (0: any leak).
    leak_max_bytes: int = DEFAULT_LEAK_MAX_BYTES
    leak_cron: str = DEFAULT_LEAK_CRON
    # A reclaim deletes only objects last modified at least this many days ago.
    leak_min_age_days: float = DEFAULT_LEAK_MIN_AGE_DAYS
    # Catalogs whose reported roots the scheduled leak report reclaims (comma-separated
    # names). Empty: none, the report deletes nothing.
    leak_auto_reclaim_catalogs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.realms is not None:
            object.__setattr__(self, "realms", tuple(self.realms))
        for name, spec in _SPECS.items():
            value = getattr(self, name)
            if value is not None and spec.check is not None:
                _checked(spec.check, value, name)

    @property
    def policy(self) -> LeasePolicy:
        """The lease policy these settings give."""
        return dataclasses.replace(
            _POLICY,
            lease_timeout_ms=self.lease_timeout_ms,
            grace_ms=self.grace_ms,
            max_attempts=self.max_attempts,
            metadata_batch_size=self.metadata_batch_size,
            unreferenced=self.unreferenced,
            polaris_version=self.polaris_version,
            realm_overrides=self.realm_overrides,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PipelineSettings:
        """The defaults, with every variable of ``_SPECS`` that is set and not blank."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, spec in _SPECS.items():
            raw = env.get(spec.env)
            if raw is None or not raw.strip():
                continue
            try:
                value = spec.parse(raw)
                if spec.check is not None:
                    spec.check(value)
            except ValueError as exc:
                # Name the variable; the URL's value may hold a password, the others not.
                shown = "" if name == "metastore_url" else f"={raw.strip()!r}"
                raise SettingsError(f"{spec.env}{shown}: {exc}") from None
            values[name] = value
        return cls(**values)

    def with_overrides(self, **overrides: Any) -> PipelineSettings:
        """These settings with each override that is not None (flags beat the environment).

        Keys are field names; an unknown one is a programming error (TypeError).
        """
        changes: dict[str, Any] = {}
        for name, value in overrides.items():
            if name not in _SPECS:
                raise TypeError(f"unknown setting {name!r}")
            if value is None:
                continue
            if name == "realms":
                value = tuple(dict.fromkeys(value))
            spec = _SPECS[name]
            if spec.check is not None:
                _checked(spec.check, value, spec.flag or name)
            changes[name] = value
        return dataclasses.replace(self, **changes)

    def realm_list(self) -> list[str] | None:
        """``realms`` as the metastore's calls take it."""
        return list(self.realms) if self.realms is not None else None


def _checked(check: Callable[[Any], object], value: Any, label: str) -> None:
    try:
        check(value)
    except (ValueError, TypeError) as exc:
        shown = ",".join(value) if isinstance(value, tuple) else value
        raise SettingsError(f"{label} {shown!r}: {exc}") from None
