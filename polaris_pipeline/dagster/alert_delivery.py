"""An alert and where it goes: the alerts section's webhook and e-mail, sent by apprise.

One client, one e-mail path: the webhook is apprise's JSON service with ``{"text": ...}``
(Slack, Mattermost, Teams workflow); e-mail is ``mailtos://`` with verified STARTTLS
(system CAs or ``SSL_CERT_FILE``), else ``mailto://`` to a plain relay, one message per
recipient. The URLs hold secrets: never in a repr; apprise's own log (which quotes them)
is kept from the application's handlers; a failure is one line, secrets masked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from polaris_pipeline.settings import AlertSection
from polaris_pipeline.storage.redact import maskable, redact

if TYPE_CHECKING:
    import apprise

# Apprise logs each URL it loads and sends to, secrets included, at DEBUG: its records
# never reach the application's handlers. They are still made, at every level, since a
# failure's reason is read from them (apprise's result keeps a call's records). Its
# name is apprise.LOGGER_NAME, set here before apprise is first imported (test_dagster_alerts).
APPRISE_LOGGER_NAME = "apprise"
_APPRISE_LOG = logging.getLogger(APPRISE_LOGGER_NAME)
_APPRISE_LOG.propagate = False
_APPRISE_LOG.setLevel(logging.DEBUG)


class _MaskSecrets(logging.Filter):
    """Masks the webhooks' secrets in urllib3's records (its DEBUG line of each request
    quotes the path and query, where an incoming webhook keeps its secret)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(secret in message for secret in self.secrets):
            record.msg, record.args = redact(message, self.secrets), None
        return True


_MASK_WEBHOOK_SECRETS = _MaskSecrets()
for _name in ("urllib3.connectionpool", "urllib3.util.retry"):
    logging.getLogger(_name).addFilter(_MASK_WEBHOOK_SECRETS)


@cache
def _apprise() -> ModuleType:
    # Imported on first use: every run worker loads this module with the code
    # location, and only a location with alerts configured needs apprise.
    import apprise

    return apprise


@cache
def _asset() -> apprise.AppriseAsset:
    return _apprise().AppriseAsset(app_id="polaris-pipeline", app_desc="polaris-pipeline alerts")


# Apprise's JSON payload, mapped to the one key incoming webhooks read ("" drops a key).
_WEBHOOK_PAYLOAD = {
    ":message": "text",
    ":version": "",
    ":title": "",
    ":attachments": "",
    ":type": "",
}


@dataclass(frozen=True)
class Alert:
    """What is sent: a one-line title, a body, and where to look."""

    title: str
    body: str
    run_id: str | None = None
    url: str | None = None
    severity: str = "ERROR"

    def text(self) -> str:
        """Title, body and link, one per line: the webhook's whole message."""
        return f"{self.title}\n{self.message()}"

    def message(self) -> str:
        """Body and link: an e-mail's, whose subject is the title."""
        link = f"\n{self.url}" if self.url else ""
        return f"{self.body}{link}"


Notify = Callable[[Alert], None]


@dataclass(frozen=True)
class Destination:
    """One apprise URL; ``subject``: its service shows the title apart (e-mail) rather
    than as the message's first line (a webhook)."""

    name: str
    url: str = field(repr=False)
    subject: bool
    # Every string whose appearance in a log line would give a secret away.
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def client(self) -> apprise.Apprise:
        """An apprise client for this URL; ValueError when apprise refuses it."""
        client = _apprise().Apprise(asset=_asset())
        with _apprise_warnings() as refused:
            accepted = client.add(self.url)
        if not accepted:
            reason = self._reason(refused) or "not a valid destination"
            raise ValueError(f"alerts: apprise refuses the {self.name}: {reason}")
        return client

    def send(self, alert: Alert) -> str | None:
        """Sends ``alert``; None when sent, else why not (one line, secrets masked)."""
        client = self.client()
        title, body = (alert.title, alert.message()) if self.subject else ("", alert.text())
        result = client.notify(
            body=body,
            title=title,
            body_format=_apprise().NotifyFormat.TEXT,
            log_level=logging.DEBUG,
        )
        if result:
            return None
        lines = [
            entry.message
            for entry in result.logs()
            # The warnings say what failed; the debug "Socket Exception" line says why
            # (a certificate that did not verify, a refused connection).
            if entry.level in ("WARNING", "ERROR", "CRITICAL") or "Exception:" in entry.message
        ]
        return self._reason(lines) or "apprise reported a failure"

    def _reason(self, lines: Sequence[str]) -> str:
        return redact(" ".join(line.strip() for line in lines if line.strip()), self.secrets)


@contextmanager
def _apprise_warnings() -> Iterator[list[str]]:
    """The warnings apprise logs inside the block (why it refused a URL)."""
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    _APPRISE_LOG.addHandler(handler)
    try:
        yield messages
    finally:
        _APPRISE_LOG.removeHandler(handler)


@dataclass(frozen=True)
class Destinations:
    """The section's destinations; called, a ``Notify`` that sends to each in turn. One
    that fails does not keep the others from sending; then one error names each."""

    destinations: tuple[Destination, ...]

    def __call__(self, alert: Alert) -> None:
        errors = [f"{d.name}: {reason}" for d in self.destinations if (reason := d.send(alert))]
        if errors:
            raise RuntimeError(f"{len(errors)} alert destination(s) failed: {'; '.join(errors)}")


def webhook_destination(url: str) -> Destination:
    """The incoming webhook at ``url`` (its own query string kept) as apprise's JSON
    service, POSTing ``{"text": ...}``."""
    parts = urlsplit(url)
    scheme = "jsons" if parts.scheme.lower() == "https" else "json"
    # Apprise reads its own options from the query: the webhook's go as "-name" (GET).
    own = [(f"-{k}", v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    query = urlencode([*_WEBHOOK_PAYLOAD.items(), *own])
    secrets = tuple(maskable((url, parts.path, parts.query)))
    _MASK_WEBHOOK_SECRETS.secrets.update(secrets)
    return Destination("webhook", f"{scheme}://{parts.netloc}{parts.path}?{query}", False, secrets)


def email_destination(section: AlertSection) -> Destination | None:
    """The e-mail the section sets (None without addresses); the section refuses a login
    without STARTTLS unless ``smtp_login_insecure`` says the link is trusted."""
    if section.email_to is None:
        return None
    login = ""
    if section.smtp_user:
        password = f":{quote(section.smtp_password, safe='')}" if section.smtp_password else ""
        login = f"{quote(section.smtp_user, safe='')}{password}@"
    options = {
        "smtp": section.smtp_host,
        "from": section.email_from,
        "to": ",".join(section.email_to),
        "mode": "starttls" if section.smtp_starttls else "insecure",
        "format": "text",
    }
    scheme = "mailtos" if section.smtp_starttls else "mailto"
    url = f"{scheme}://{login}{section.smtp_host}:{section.smtp_port}/?{urlencode(options)}"
    password = section.smtp_password or ""
    secrets = tuple(maskable({password, quote(password, safe="")}))
    return Destination("e-mail", url, True, secrets)


def destinations_of(section: AlertSection | None) -> Destinations | None:
    """The destinations the section sets (a ``Notify``), each checked by apprise now (a
    bad one is refused at load, not at the first alert); None when it sets none."""
    if section is None or not section.configured:
        return None
    destinations = [
        *([webhook_destination(section.webhook_url)] if section.webhook_url else []),
        *([email] if (email := email_destination(section)) else []),
    ]
    for destination in destinations:
        destination.client()
    return Destinations(tuple(destinations))
