"""Alerts, off unless configured: a failed run, or a backlog check that starts failing.

With no destination there is no alert sensor. With one (``alert_delivery``):
``polaris_run_failure_alert`` for every failed run of the code location, and
``polaris_check_failure_alert`` once for a backlog check that starts failing (Dagster OSS
has no alert on asset checks). Both take any ``Notify`` for other destinations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    run_failure_sensor,
    sensor,
)

from polaris_pipeline.dagster.alert_delivery import Alert, Notify, destinations_of
from polaris_pipeline.dagster.backlog.checks import CHECK_NAMES
from polaris_pipeline.dagster.backlog.report import ASSET_KEY
from polaris_pipeline.dagster.contract import TAG_REALM, TAG_TABLE, TAG_TASK_ID, TAG_TASK_TYPE
from polaris_pipeline.dagster.reporting import run_total
from polaris_pipeline.settings import AlertSection
from polaris_pipeline.storage.redact import redact

RUN_ALERT_NAME = "polaris_run_failure_alert"
CHECK_ALERT_NAME = "polaris_check_failure_alert"


# The tags of a task run an alert shows (the contract's), each as "<name>: <value>".
_TAGS_SHOWN = (TAG_TABLE, TAG_REALM, TAG_TASK_ID, TAG_TASK_TYPE)
# How often the check alert reads the checks' new evaluations.
_CHECK_ALERT_INTERVAL_S = 30


def _run_url(ui_url: str | None, run_id: str) -> str | None:
    return f"{ui_url.rstrip('/')}/runs/{run_id}" if ui_url else None


def run_failure_alert(
    job_name: str,
    run_id: str,
    tags: Mapping[str, str],
    error: str | None,
    ui_url: str | None = None,
    kept: str = "",
) -> Alert:
    """The alert of one failed run (pure: tested without a sensor). ``kept``: what the
    run deleted on storage that keeps deleted objects (``OutcomeTotals.retention_text``),
    so that nobody reads the deletes before the failure as space freed."""
    shown = [f"{k.split('/', 1)[1]}: {tags[k]}" for k in _TAGS_SHOWN if tags.get(k)]
    subject = tags.get(TAG_TABLE) or tags.get(TAG_REALM) or ""
    title = f"Dagster run of {job_name} failed" + (f" ({subject})" if subject else "")
    lines = [*shown, f"run: {run_id}", f"error: {redact((error or 'see the run log').strip())}"]
    if kept:
        lines.append(f"before failing: {kept}")
    return Alert(title, "\n".join(lines), run_id=run_id, url=_run_url(ui_url, run_id))


def _run_error(context: RunFailureSensorContext) -> str | None:
    """The first failed step's error (a task's own reason: what refused it, naming the
    live table that shares its files); else the run's failure message."""
    for event in context.get_step_failure_events():
        error = getattr(event.event_specific_data, "error", None)
        message = getattr(error, "message", None)
        if isinstance(message, str) and message.strip():
            # Dagster prefixes the exception's class ("dagster...Failure: ").
            return message.strip().split(": ", 1)[-1] if "Failure: " in message else message
    return context.failure_event.message if context.failure_event else None


def build_polaris_failure_alert(
    notify: Notify,
    *,
    name: str = RUN_ALERT_NAME,
    ui_url: str | None = None,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    description: str | None = None,
) -> SensorDefinition:
    """A run-failure sensor over the code location's jobs that calls ``notify``."""

    @run_failure_sensor(
        name=name,
        default_status=default_status,
        description=description
        or "Sends every failed run of this code location (table, realm, error, link) on.",
    )
    def _alert(context: RunFailureSensorContext) -> None:
        run = context.dagster_run
        # Empty unless the run deleted on storage that keeps deleted objects.
        kept = run_total(context.instance, run.run_id).retention_text()
        error = _run_error(context)
        notify(run_failure_alert(run.job_name, run.run_id, run.tags, error, ui_url, kept=kept))

    return _alert


@dataclass(frozen=True)
class CheckFailure:
    check_name: str
    severity: str
    description: str
    run_id: str | None = None  # None: reported by a sensor, not evaluated in a run


# Evaluations read per check and alert tick: more than arrive between two ticks.
_CHECK_HISTORY = 50


def newly_failed_checks(
    instance: DagsterInstance,
    asset_key: AssetKey,
    check_names: Sequence[str],
    after_id: int = 0,
) -> tuple[list[CheckFailure], int]:
    """Evaluations stored after record ``after_id`` that fail where the one before did not.

    The sweeper and its watch report the checks with no run, and a run (Execute,
    Materialize) may evaluate them too: both are records of the check's history.
    A record without an evaluation (planned, or its step crashed) is skipped.
    Returns the failures, oldest first, and the newest record id seen (the cursor).
    """
    failures: list[tuple[int, CheckFailure]] = []
    newest = after_id
    for name in check_names:
        history = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(asset_key, name), limit=_CHECK_HISTORY
        )
        evaluated = sorted(
            (
                (h.id, h.run_id, e.dagster_event.asset_check_evaluation_data)
                for h in history
                if (e := h.event) is not None
                and e.dagster_event is not None
                and e.dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
            ),
            key=lambda r: r[0],
        )
        for before, (record_id, run_id, evaluation) in zip(
            [None, *evaluated], evaluated, strict=False
        ):
            newest = max(newest, record_id)
            if record_id <= after_id or evaluation.passed:
                continue
            if before is not None and not before[2].passed:
                continue  # still failing: paged when it started
            failure = CheckFailure(
                name, evaluation.severity.value, evaluation.description or "", run_id or None
            )
            failures.append((record_id, failure))
    failures.sort(key=lambda f: f[0])
    return [f for _, f in failures], newest


def _checks_url(ui_url: str | None, asset_key: AssetKey) -> str | None:
    if not ui_url:
        return None
    return f"{ui_url.rstrip('/')}/assets/{'/'.join(asset_key.path)}?view=checks"


def build_polaris_check_alert(
    notify: Notify,
    *,
    name: str = CHECK_ALERT_NAME,
    ui_url: str | None = None,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    description: str | None = None,
    asset_key: AssetKey = ASSET_KEY,
    check_names: Sequence[str] = CHECK_NAMES,
) -> SensorDefinition:
    """Calls ``notify`` when a backlog check starts failing, reading the checks' stored
    evaluations (sensors report them with no run) after its cursor, the last record id seen.
    """

    @sensor(
        name=name,
        minimum_interval_seconds=_CHECK_ALERT_INTERVAL_S,
        default_status=default_status,
        description=description
        or (
            "Sends a backlog check that starts failing (dead tasks, permanent failures, stale "
            "orphans, a sweeper that stopped sweeping) on, once per failure."
        ),
    )
    def _alert(context: SensorEvaluationContext) -> SkipReason:
        raw = context.cursor or ""
        after = int(raw) if raw.isdigit() else 0
        failures, newest = newly_failed_checks(context.instance, asset_key, check_names, after)
        for failure in failures:
            notify(
                Alert(
                    f"Polaris check {failure.check_name} failed ({failure.severity})",
                    failure.description,
                    run_id=failure.run_id,
                    url=(
                        _run_url(ui_url, failure.run_id)
                        if failure.run_id
                        else _checks_url(ui_url, asset_key)
                    ),
                    severity=failure.severity,
                )
            )
        context.update_cursor(str(newest))
        return SkipReason(f"{len(failures)} check(s) started failing" if failures else "no news")

    return _alert


def alert_sensors(alerts: AlertSection | None) -> list[SensorDefinition]:
    """The alert sensors of the alerts section, RUNNING; none without a destination
    (alerts are opt-in)."""
    notify = destinations_of(alerts)
    if alerts is None or notify is None:
        return []
    return [
        build_polaris_failure_alert(notify, ui_url=alerts.ui_url),
        build_polaris_check_alert(notify, ui_url=alerts.ui_url),
    ]
