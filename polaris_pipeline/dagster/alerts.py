"""Alerts, off unless configured: a failed run, or a backlog check that starts failing.

With no destination there is no alert sensor at all. With one (``destinations_of``
the alerts section: a webhook, e-mail, or both; or a ``notify`` of your own):

- ``polaris_run_failure_email``: Dagster's own ``make_email_on_run_failure_sensor``
  with our subject and body (table, realm, task, error, a link), for e-mail over
  STARTTLS with a login, the only kind it sends (it always uses TLS and logs in);
- ``polaris_run_failure_alert`` (``build_polaris_failure_alert``): every failed run
  sent to ``notify(Alert)``: the webhook (Dagster has no incoming-webhook sensor;
  dagster-slack's needs a bot token) and e-mail through a plain relay, or verified
  against ``smtp_ca_file``, which Dagster's sensor cannot use;
- ``polaris_check_failure_alert`` (``build_polaris_check_alert``): a backlog check
  (dead tasks, permanent failures, stale orphans, sweeper freshness) that starts
  failing, once, to every destination: Dagster OSS has no alert on asset checks.

No credential travels in clear: STARTTLS verifies the server's certificate and name
before the login, a login without it needs ``smtp_login_insecure``, an ``http://``
webhook needs ``webhook_allow_http_insecure`` (both checked by the alerts section).

docs/dagster.md has the variables and a dagster-slack recipe for a ``notify``.
"""

from __future__ import annotations

import html
import json
import smtplib
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from email.message import EmailMessage

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
    make_email_on_run_failure_sensor,
    run_failure_sensor,
    sensor,
)

from polaris_pipeline.dagster.backlog.checks import CHECK_NAMES
from polaris_pipeline.dagster.backlog.report import ASSET_KEY
from polaris_pipeline.dagster.contract import TAG_REALM, TAG_TABLE, TAG_TASK_ID, TAG_TASK_TYPE
from polaris_pipeline.dagster.reporting import run_total
from polaris_pipeline.settings import AlertSection
from polaris_pipeline.settings.alerts import plaintext_login_refusal
from polaris_pipeline.storage.redact import redact

RUN_ALERT_NAME = "polaris_run_failure_alert"
RUN_EMAIL_ALERT_NAME = "polaris_run_failure_email"
CHECK_ALERT_NAME = "polaris_check_failure_alert"


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
    lines = [*shown, f"run: {run_id}", f"error: {redact((error or 'see the run log').strip())}"]
    if kept:
        lines.append(f"before failing: {kept}")
    return Alert(title, "\n".join(lines), run_id=run_id, url=_run_url(ui_url, run_id))


def _failed_run_alert(context: RunFailureSensorContext, ui_url: str | None) -> Alert:
    """The alert of the run ``context`` reports, as both run-failure sensors send it."""
    run = context.dagster_run
    # Empty unless the run deleted on storage that keeps deleted objects.
    kept = run_total(context.instance, run.run_id).retention_text()
    return run_failure_alert(
        run.job_name, run.run_id, run.tags, _run_error(context), ui_url, kept=kept
    )


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
        notify(_failed_run_alert(context, ui_url))

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
    webhook takes. The URL is checked by the alerts section (https, unless allowed)."""

    def notify(alert: Alert) -> None:
        body = json.dumps({"text": alert.text()}).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                response.read()
        except (urllib.error.URLError, OSError) as exc:
            # The URL is the secret: an error that quotes it is masked.
            raise RuntimeError(redact(f"webhook: {type(exc).__name__}: {exc}", [url])) from None

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
    # The CAs the server's certificate is verified against; None: the system's.
    ca_file: str | None = None
    # Log in without TLS (the password in clear): only for a link the operator trusts.
    login_insecure: bool = False

    def __post_init__(self) -> None:
        refusal = plaintext_login_refusal(self.user, self.starttls, self.login_insecure)
        if refusal:
            raise ValueError(refusal)

    @property
    def dagster_sends_run_failures(self) -> bool:
        """Whether Dagster's e-mail sensor can send through this server: it always
        starts TLS and logs in (``smtp_type`` SSL or STARTTLS, a user and password), and
        verifies against the system's CAs only (no ``ca_file``)."""
        return (
            self.starttls and bool(self.user) and self.password is not None and self.ca_file is None
        )

    def tls_context(self) -> ssl.SSLContext:
        """A context that verifies the server's certificate and its name."""
        return ssl.create_default_context(cafile=self.ca_file)


def email_notifier(smtp: SmtpSettings) -> Notify:
    """Sends each alert as one e-mail through ``smtp``: the check alerts (Dagster has no
    sender for those) and run failures through a relay without TLS or login."""

    def notify(alert: Alert) -> None:
        message = EmailMessage()
        message["Subject"] = alert.title
        message["From"] = smtp.sender
        message["To"] = ", ".join(smtp.to)
        message.set_content(alert.text())
        with smtplib.SMTP(smtp.host, smtp.port, timeout=_TIMEOUT_S) as client:
            if smtp.starttls:
                # Verified: a server whose certificate or name does not match never
                # sees the login below.
                client.starttls(context=smtp.tls_context())
            if smtp.user:
                client.login(smtp.user, smtp.password or "")
            client.send_message(message)

    return notify


def build_polaris_failure_email(smtp: SmtpSettings, ui_url: str | None = None) -> SensorDefinition:
    """Dagster's ``make_email_on_run_failure_sensor`` (STARTTLS, a login) sending
    ``run_failure_alert``'s subject and body; the link is Dagster's own."""
    if not smtp.dagster_sends_run_failures:
        raise ValueError("Dagster's e-mail sensor needs STARTTLS, a user and a password")

    def body(context: RunFailureSensorContext) -> str:
        # Dagster sends HTML: each line escaped, one per line.
        alert = _failed_run_alert(context, None)
        return "<br>".join(html.escape(line) for line in alert.body.splitlines())

    return make_email_on_run_failure_sensor(
        email_from=smtp.sender,
        email_password=smtp.password or "",
        email_to=list(smtp.to),
        email_body_fn=body,
        email_subject_fn=lambda context: _failed_run_alert(context, None).title,
        smtp_host=smtp.host,
        smtp_type="STARTTLS",
        smtp_port=smtp.port,
        smtp_user=smtp.user,
        name=RUN_EMAIL_ALERT_NAME,
        webserver_base_url=ui_url.rstrip("/") if ui_url else None,
        default_status=DefaultSensorStatus.RUNNING,
    )


def fan_out(notifiers: Sequence[Notify]) -> Notify:
    """Every notifier in turn; one that fails does not keep the others from sending."""

    def notify(alert: Alert) -> None:
        errors: list[str] = []
        for one in notifiers:
            try:
                one(alert)
            except Exception as exc:  # a destination down must not hide the alert elsewhere
                errors.append(redact(f"{type(exc).__name__}: {exc}"))
        if errors:
            raise RuntimeError(f"{len(errors)} alert destination(s) failed: {'; '.join(errors)}")

    return notify


@dataclass(frozen=True)
class Destinations:
    """The destinations the environment configures; called, it is a ``Notify`` that sends
    to each. ``alert_sensors`` leaves its e-mail of run failures to Dagster's sensor
    where that can send it."""

    webhook_url: str | None = field(default=None, repr=False)  # a secret: never shown
    smtp: SmtpSettings | None = None

    def __call__(self, alert: Alert) -> None:
        notifiers = [
            *([webhook_notifier(self.webhook_url)] if self.webhook_url else []),
            *([email_notifier(self.smtp)] if self.smtp else []),
        ]
        (notifiers[0] if len(notifiers) == 1 else fan_out(notifiers))(alert)


def smtp_of(section: AlertSection) -> SmtpSettings | None:
    """The e-mail destination the alerts section sets; None without addresses."""
    if section.email_to is None:
        return None
    return SmtpSettings(
        to=tuple(section.email_to),
        host=section.smtp_host,
        port=section.smtp_port,
        sender=section.email_from,
        user=section.smtp_user,
        password=section.smtp_password,
        starttls=section.smtp_starttls,
        ca_file=section.smtp_ca_file,
        login_insecure=section.smtp_login_insecure,
    )


def destinations_of(section: AlertSection) -> Destinations | None:
    """The destinations the alerts section sets (a ``Notify``); None when it sets none."""
    if not section.configured:
        return None
    return Destinations(section.webhook_url, smtp_of(section))


def alert_sensors(notify: Notify | None, ui_url: str | None = None) -> list[SensorDefinition]:
    """The alert sensors for ``notify``, RUNNING; none without it (alerts are opt-in).

    ``Destinations`` whose e-mail Dagster's sensor can send get that sensor for run
    failures, and ours only for the webhook, if there is one.
    """
    if notify is None:
        return []
    sensors = [build_polaris_check_alert(notify, ui_url=ui_url)]
    run_notify: Notify | None = notify
    if isinstance(notify, Destinations) and notify.smtp and notify.smtp.dagster_sends_run_failures:
        sensors.append(build_polaris_failure_email(notify.smtp, ui_url))
        run_notify = replace(notify, smtp=None) if notify.webhook_url else None
    if run_notify is not None:
        sensors.append(build_polaris_failure_alert(run_notify, ui_url=ui_url))
    return sensors
