"""Alerts: a failed run, or a failed backlog check, sent to whoever must act.

Two sensors share one ``notify(Alert)`` function:

- ``polaris_run_failure_alert`` (``build_polaris_failure_alert``): every failed
  run of the code location's jobs, with its table, realm and task tags, the
  error and a link to the run;
- ``polaris_check_failure_alert`` (``build_polaris_check_alert``): a backlog check
  (dead tasks, permanent failures, stale orphans, sweeper freshness) that starts
  failing; a check that keeps failing pages once, not at every refresh.

Both are off until configured: ``build_defs_from_env`` gives them a
``notify`` built from the environment (a Slack incoming webhook, e-mail through
SMTP, or both) and starts them RUNNING only when one is set. Without a
destination they are STOPPED and say so in their description; starting one by
hand then only logs. docs/dagster.md has the variables and a dagster-slack
recipe for a ``notify`` of your own.
"""

from __future__ import annotations

import json
import logging
import smtplib
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage

from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterInstance,
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    run_failure_sensor,
    sensor,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from polaris_pipeline.dagster.backlog.checks import CHECK_NAMES
from polaris_pipeline.dagster.backlog.report import ASSET_KEY
from polaris_pipeline.dagster.contract import TAG_REALM, TAG_TABLE, TAG_TASK_ID, TAG_TASK_TYPE
from polaris_pipeline.dagster.reporting import run_total

log = logging.getLogger(__name__)

RUN_ALERT_NAME = "polaris_run_failure_alert"
CHECK_ALERT_NAME = "polaris_check_failure_alert"

WEBHOOK_ENV = "POLARIS_PIPELINE_ALERT_WEBHOOK_URL"
EMAIL_TO_ENV = "POLARIS_PIPELINE_ALERT_EMAIL_TO"
EMAIL_FROM_ENV = "POLARIS_PIPELINE_ALERT_EMAIL_FROM"
SMTP_HOST_ENV = "POLARIS_PIPELINE_ALERT_SMTP_HOST"
SMTP_PORT_ENV = "POLARIS_PIPELINE_ALERT_SMTP_PORT"
SMTP_USER_ENV = "POLARIS_PIPELINE_ALERT_SMTP_USER"
SMTP_PASSWORD_ENV = "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD"
SMTP_STARTTLS_ENV = "POLARIS_PIPELINE_ALERT_SMTP_STARTTLS"
UI_URL_ENV = "POLARIS_PIPELINE_ALERT_UI_URL"

# The tags of a task run an alert shows (the contract's), each as "<name>: <value>".
_TAGS_SHOWN = (TAG_TABLE, TAG_REALM, TAG_TASK_ID, TAG_TASK_TYPE)
_TIMEOUT_S = 10.0
# How often the check alert reads the checks' new evaluations.
_CHECK_ALERT_INTERVAL_S = 30


@dataclass(frozen=True)
class Alert:
    """What is sent: a one-line title, a body, and where to look."""

    title: str
    body: str
    run_id: str | None = None
    url: str | None = None
    severity: str = "ERROR"

    def text(self) -> str:
        link = f"\n{self.url}" if self.url else ""
        return f"{self.title}\n{self.body}{link}"


Notify = Callable[[Alert], None]


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
    lines = [*shown, f"run: {run_id}", f"error: {(error or 'see the run log').strip()}"]
    if kept:
        lines.append(f"before failing: {kept}")
    return Alert(title, "\n".join(lines), run_id=run_id, url=_run_url(ui_url, run_id))


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
        notify(
            run_failure_alert(
                run.job_name, run.run_id, run.tags, _run_error(context), ui_url, kept=kept
            )
        )

    return _alert


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


@dataclass(frozen=True)
class CheckFailure:
    check_name: str
    severity: str
    description: str
    run_id: str | None = None  # None: reported by a sensor, not evaluated in a run


# Evaluations read per check and alert tick: more than arrive between two ticks.
_CHECK_HISTORY = 50
_DONE = (AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED)


def newly_failed_checks(
    instance: DagsterInstance,
    asset_key: AssetKey,
    check_names: Sequence[str],
    after_id: int = 0,
) -> tuple[list[CheckFailure], int]:
    """Evaluations stored after record ``after_id`` that fail where the one before did not.

    The sweeper and its watch report the checks with no run, and a run (Execute,
    Materialize) may evaluate them too: both are records of the check's history.
    Returns the failures, oldest first, and the newest record id seen (the cursor).
    """
    failures: list[tuple[int, CheckFailure]] = []
    newest = after_id
    for name in check_names:
        key = AssetCheckKey(asset_key, name)
        history = [
            h
            for h in instance.event_log_storage.get_asset_check_execution_history(
                key, limit=_CHECK_HISTORY
            )
            if h.status in _DONE
        ]
        history.sort(key=lambda h: h.id)
        for before, record in zip([None, *history], history, strict=False):
            newest = max(newest, record.id)
            if record.id <= after_id or record.status != AssetCheckExecutionRecordStatus.FAILED:
                continue
            if before is not None and before.status == AssetCheckExecutionRecordStatus.FAILED:
                continue  # still failing: paged when it started
            event = record.event.dagster_event if record.event else None
            evaluation = event.asset_check_evaluation_data if event else None
            failures.append(
                (
                    record.id,
                    CheckFailure(
                        name,
                        evaluation.severity.value if evaluation else "ERROR",
                        (evaluation.description if evaluation else None) or "",
                        record.run_id or None,
                    ),
                )
            )
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
    """Calls ``notify`` when a backlog check starts failing.

    The checks are reported by sensors, with no run (polaris_pipeline.dagster.backlog):
    this sensor reads the checks' stored evaluations after its cursor (the last
    record id it saw).
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


# ------------------------------------------------------------------ destinations


def webhook_notifier(url: str) -> Notify:
    """POSTs ``{"text": ...}``: the body a Slack (or Mattermost, Teams workflow) incoming
    webhook takes."""

    def notify(alert: Alert) -> None:
        body = json.dumps({"text": alert.text()}).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            response.read()

    return notify


@dataclass(frozen=True)
class SmtpSettings:
    to: tuple[str, ...]
    host: str = "localhost"
    port: int = 25
    sender: str = "polaris-pipeline@localhost"
    user: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a repr or a log
    starttls: bool = False


def email_notifier(smtp: SmtpSettings) -> Notify:
    """Sends each alert as one e-mail through ``smtp`` (smtplib)."""

    def notify(alert: Alert) -> None:
        message = EmailMessage()
        message["Subject"] = alert.title
        message["From"] = smtp.sender
        message["To"] = ", ".join(smtp.to)
        message.set_content(alert.text())
        with smtplib.SMTP(smtp.host, smtp.port, timeout=_TIMEOUT_S) as client:
            if smtp.starttls:
                client.starttls()
            if smtp.user:
                client.login(smtp.user, smtp.password or "")
            client.send_message(message)

    return notify


def fan_out(notifiers: Sequence[Notify]) -> Notify:
    """Every notifier in turn; one that fails does not keep the others from sending."""

    def notify(alert: Alert) -> None:
        errors: list[str] = []
        for one in notifiers:
            try:
                one(alert)
            except Exception as exc:  # a destination down must not hide the alert elsewhere
                errors.append(f"{type(exc).__name__}: {exc}")
        if errors:
            raise RuntimeError(f"{len(errors)} alert destination(s) failed: {'; '.join(errors)}")

    return notify


def _unconfigured(alert: Alert) -> None:
    log.warning(
        "alert not sent (no destination: set %s or %s): %s", WEBHOOK_ENV, EMAIL_TO_ENV, alert.title
    )


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def ui_url_from_env(env: Mapping[str, str]) -> str | None:
    """The Dagster UI address alerts link to (``POLARIS_PIPELINE_ALERT_UI_URL``), if set."""
    return _env(env, UI_URL_ENV)


def smtp_from_env(env: Mapping[str, str]) -> SmtpSettings | None:
    to = _env(env, EMAIL_TO_ENV)
    if to is None:
        return None
    recipients = tuple(r.strip() for r in to.split(",") if r.strip())
    if not recipients or not all("@" in r for r in recipients):
        raise ValueError(f"{EMAIL_TO_ENV}: a comma-separated list of e-mail addresses")
    raw_port = _env(env, SMTP_PORT_ENV) or "25"
    try:
        port = int(raw_port)
    except ValueError:
        raise ValueError(f"{SMTP_PORT_ENV}={raw_port!r}: not an integer") from None
    starttls = (_env(env, SMTP_STARTTLS_ENV) or "false").lower()
    if starttls not in ("true", "false"):
        raise ValueError(f"{SMTP_STARTTLS_ENV}={starttls!r}: true or false")
    return SmtpSettings(
        to=recipients,
        host=_env(env, SMTP_HOST_ENV) or "localhost",
        port=port,
        sender=_env(env, EMAIL_FROM_ENV) or "polaris-pipeline@localhost",
        user=_env(env, SMTP_USER_ENV),
        password=env.get(SMTP_PASSWORD_ENV) or None,
        starttls=starttls == "true",
    )


def notifier_from_env(env: Mapping[str, str]) -> Notify | None:
    """The configured destinations as one ``notify``; None when none is configured."""
    notifiers: list[Notify] = []
    url = _env(env, WEBHOOK_ENV)
    if url is not None:
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"{WEBHOOK_ENV}: an http(s) URL")  # the URL is a secret: not shown
        notifiers.append(webhook_notifier(url))
    smtp = smtp_from_env(env)
    if smtp is not None:
        notifiers.append(email_notifier(smtp))
    if not notifiers:
        return None
    return notifiers[0] if len(notifiers) == 1 else fan_out(notifiers)


def alert_sensors(notify: Notify | None, ui_url: str | None = None) -> list[SensorDefinition]:
    """Both alert sensors: RUNNING with ``notify``; STOPPED, and saying so, without."""
    if notify is not None:
        return [
            build_polaris_failure_alert(notify, ui_url=ui_url),
            build_polaris_check_alert(notify, ui_url=ui_url),
        ]
    off = (
        f" Not configured: set {WEBHOOK_ENV} (a Slack incoming webhook) or {EMAIL_TO_ENV} "
        "(and the SMTP variables) on the code location, or pass your own notify to "
        "build_defs (docs/dagster.md); until then it is stopped and would only log."
    )
    return [
        build_polaris_failure_alert(
            _unconfigured,
            default_status=DefaultSensorStatus.STOPPED,
            description="Sends every failed run of this code location on." + off,
        ),
        build_polaris_check_alert(
            _unconfigured,
            default_status=DefaultSensorStatus.STOPPED,
            description="Sends a backlog check that starts failing on." + off,
        ),
    ]
