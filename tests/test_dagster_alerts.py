"""Alerts: failed runs and failing backlog checks, sent to a real webhook and SMTP server."""

from __future__ import annotations

import json
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, HTTPServer
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    Failure,
    Output,
    SensorResult,
    build_run_status_sensor_context,
    build_sensor_context,
    job,
    materialize,
    op,
)

from polaris_pipeline.cleanup.context import CleanupResult
from polaris_pipeline.dagster.alert_delivery import (
    Alert,
    Destinations,
    destinations_of,
    email_destination,
)
from polaris_pipeline.dagster.alerts import (
    RUN_ALERT_NAME,
    alert_sensors,
    build_polaris_check_alert,
    build_polaris_failure_alert,
    run_failure_alert,
)
from polaris_pipeline.dagster.backlog import (
    BACKLOG_CHECKS,
    WATCH_NAME,
    BacklogSettings,
    polaris_task_backlog,
)
from polaris_pipeline.dagster.resources import SweeperSettings
from polaris_pipeline.dagster.sweeper import SENSOR_NAME
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings import AlertSection
from polaris_pipeline.tasks.ref import Lease
from tests.support.dagster import (
    alert_section,
    alert_sensors_from_env,
    deployed_sensor,
    metastore_resource,
    notifier_from_env,
    sweeper_resources,
    ui_url_from_env,
)
from tests.support.tasks import seed

# -- real destinations on 127.0.0.1 ----------------------------------------------------


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    paths: list[str] = []

    def do_POST(self) -> None:  # http.server's name
        length = int(self.headers["Content-Length"])
        self.paths.append(self.path)
        self.received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook_server() -> Iterator[tuple[str, list[dict[str, Any]], list[str]]]:
    """An HTTP server on 127.0.0.1: its URL, the JSON bodies and the paths it received."""
    received: list[dict[str, Any]] = []
    paths: list[str] = []
    handler = type("Hook", (_Hook,), {"received": received, "paths": paths})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", received, paths
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def webhook(
    webhook_server: tuple[str, list[dict[str, Any]], list[str]],
) -> tuple[str, list[dict[str, Any]]]:
    return webhook_server[:2]


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[int, _Inbox]]:
    inbox = _Inbox()
    with socket.socket() as probe:  # a free port (the controller cannot start on port 0)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


# A server that requires STARTTLS and a login, its certificate (for 127.0.0.1) trusted
# through SSL_CERT_FILE, as an operator's private CA is.
_STARTTLS_ENV = {
    "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com",
    "POLARIS_PIPELINE_ALERT_EMAIL_FROM": "dagster@example.com",
    "POLARIS_PIPELINE_ALERT_SMTP_HOST": "127.0.0.1",
    "POLARIS_PIPELINE_ALERT_SMTP_STARTTLS": "true",
    "POLARIS_PIPELINE_ALERT_SMTP_USER": "alerts",
    "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD": "s3cret",
}


def _self_signed_certificate(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) for ``host``, an IP address or a DNS name."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        alt_name: x509.GeneralName = x509.IPAddress(ip_address(host))
    except ValueError:
        alt_name = x509.DNSName(host)
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([alt_name]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{host}.crt", directory / f"{host}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class _SmtpServer:
    """An SMTP server on 127.0.0.1 that records every login it receives (the password
    included: what must never reach a server the client did not verify)."""

    def __init__(self, cert: Path | None, key: Path | None, *, require_tls: bool) -> None:
        tls = None
        if cert is not None and key is not None:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(cert, key)
        self.logins: list[tuple[str, str]] = []
        self.inbox = _Inbox()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.controller = Controller(
            self.inbox,
            hostname="127.0.0.1",
            port=self.port,
            tls_context=tls,
            require_starttls=require_tls,
            auth_require_tls=require_tls,
            authenticator=self._authenticate,
            auth_required=True,
        )

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> Any:
        self.logins.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=(data.login, data.password) == (b"alerts", b"s3cret"))


@pytest.fixture
def smtp_server() -> Iterator[Callable[..., _SmtpServer]]:
    started: list[_SmtpServer] = []

    def start(
        cert: Path | None = None, key: Path | None = None, *, require_tls: bool = True
    ) -> _SmtpServer:
        server = _SmtpServer(cert, key, require_tls=require_tls)
        server.controller.start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.controller.stop()


@pytest.fixture
def starttls_smtp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[int, _Inbox, list[tuple[str, str]]]]:
    cert, key = _self_signed_certificate(tmp_path)
    # Trusted as an operator's CA is, through the system's store.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    logins: list[tuple[str, str]] = []

    def authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        logins.append((data.login.decode(), data.password.decode()))
        return AuthResult(success=(data.login, data.password) == (b"alerts", b"s3cret"))

    inbox = _Inbox()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(
        inbox,
        hostname="127.0.0.1",
        port=port,
        tls_context=server_tls,
        require_starttls=True,
        authenticator=authenticate,
        auth_required=True,
    )
    controller.start()
    try:
        yield port, inbox, logins
    finally:
        controller.stop()


@pytest.fixture
def root_log() -> Iterator[list[str]]:
    """Every record that reaches the root logger's handlers, at every level: what an
    application's logging (Dagster's, a file, a collector) would write."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(f"{record.name} {record.getMessage()}")  # type: ignore[method-assign]
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


# -- the messages --------------------------------------------------------------------


def test_a_failed_run_alert_names_table_realm_task_and_link() -> None:
    alert = run_failure_alert(
        "polaris_task_job",
        "abc-123",
        {"polaris/table": "sales.payments", "polaris/realm": "POLARIS", "polaris/task_id": "42"},
        "guard refused 1 path(s)\n",
        ui_url="http://dagster.example:3000/",
    )
    assert alert.title == "Dagster run of polaris_task_job failed (sales.payments)"
    assert alert.body.splitlines() == [
        "table: sales.payments",
        "realm: POLARIS",
        "task_id: 42",
        "run: abc-123",
        "error: guard refused 1 path(s)",
    ]
    assert alert.url == "http://dagster.example:3000/runs/abc-123"
    bare = run_failure_alert("j", "r", {}, None)
    assert bare.title == "Dagster run of j failed" and bare.url is None
    assert "error: see the run log" in bare.body


# The test webhook is plain HTTP on 127.0.0.1: allowed explicitly.
_HTTP_OK = {"POLARIS_PIPELINE_ALERT_WEBHOOK_ALLOW_HTTP_INSECURE": "true"}


def test_webhook_and_email_receive_the_alert(
    webhook: tuple[str, list[dict[str, Any]]], smtp: tuple[int, _Inbox]
) -> None:
    url, received = webhook
    port, inbox = smtp
    notify = notifier_from_env(
        {
            "POLARIS_PIPELINE_ALERT_WEBHOOK_URL": url,
            **_HTTP_OK,
            "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com, oncall@example.com",
            "POLARIS_PIPELINE_ALERT_SMTP_HOST": "127.0.0.1",
            "POLARIS_PIPELINE_ALERT_SMTP_PORT": str(port),
            "POLARIS_PIPELINE_ALERT_EMAIL_FROM": "dagster@example.com",
        }
    )
    assert notify is not None
    notify(Alert("Polaris check no_dead_tasks failed (ERROR)", "2 dead", url="http://ui/runs/x"))

    assert received == [
        {"text": "Polaris check no_dead_tasks failed (ERROR)\n2 dead\nhttp://ui/runs/x"}
    ]
    # One message per recipient, the title as its subject, the body and link as text.
    assert sorted(r for r, _ in inbox.messages) == [["oncall@example.com"], ["ops@example.com"]]
    for _, message in inbox.messages:
        assert message["Subject"] == "Polaris check no_dead_tasks failed (ERROR)"
        assert message["From"] == "dagster@example.com"
        assert message.get_content_type() == "text/plain"
        assert message.get_payload().splitlines() == ["2 dead", "http://ui/runs/x"]


def _email(port: int, to: str = "ops@example.com", **more: Any) -> Destinations:
    """The e-mail destination of an alerts section for the server on ``port``."""
    section = AlertSection(email_to=[to], smtp_host="127.0.0.1", smtp_port=port, **more)
    notify = destinations_of(section)
    assert notify is not None
    return notify


def test_one_destination_down_does_not_silence_the_other(smtp: tuple[int, _Inbox]) -> None:
    port, inbox = smtp
    [down] = _email(1, "a@example.com").destinations
    [up] = _email(port, "b@example.com").destinations
    with pytest.raises(RuntimeError, match="1 alert destination") as failed:
        Destinations((down, up))(Alert("t", "b"))
    # It says which destination failed, and why, on one line.
    assert "e-mail:" in str(failed.value) and "Connection refused" in str(failed.value)
    assert len(str(failed.value).splitlines()) == 1
    assert [r for r, _ in inbox.messages] == [["b@example.com"]]


def test_a_destination_apprise_refuses_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match=r"alerts: apprise refuses the e-mail: .*From") as bad:
        _email(25, email_from="polaris-pipeline")
    assert len(str(bad.value).splitlines()) == 1


# -- credentials never travel unprotected ---------------------------------------------


def _login(port: int, **more: Any) -> Destinations:
    return _email(port, smtp_user="alerts", smtp_password="s3cret", **more)


def test_no_login_to_a_server_whose_certificate_is_not_verified(
    tmp_path: Path, smtp_server: Callable[..., _SmtpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A certificate for another name, self-signed: untrusted (nothing in the store
    # trusts it), and trusted (the store is its own file) but naming mail.example.com
    # while we connect to 127.0.0.1.
    other_cert, other_key = _self_signed_certificate(tmp_path, "mail.example.com")
    server = smtp_server(other_cert, other_key)
    for store, why in (
        (tmp_path / "no-such-bundle.pem", "self-signed certificate"),
        (other_cert, "IP address mismatch"),
    ):
        monkeypatch.setenv("SSL_CERT_FILE", str(store))
        with pytest.raises(RuntimeError, match="certificate verify failed") as refused:
            _login(server.port, smtp_starttls=True)(Alert("t", "b"))
        assert why in str(refused.value) and "s3cret" not in str(refused.value)
    assert server.logins == [] and server.inbox.messages == []


def test_a_login_goes_through_to_a_server_verified_against_the_trusted_store(
    tmp_path: Path, smtp_server: Callable[..., _SmtpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _self_signed_certificate(tmp_path, "127.0.0.1")
    # A private CA, trusted as the operator's: the store SSL_CERT_FILE names.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    server = smtp_server(cert, key)
    env = {
        "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com",
        "POLARIS_PIPELINE_ALERT_SMTP_HOST": "127.0.0.1",
        "POLARIS_PIPELINE_ALERT_SMTP_PORT": str(server.port),
        "POLARIS_PIPELINE_ALERT_SMTP_STARTTLS": "true",
        "POLARIS_PIPELINE_ALERT_SMTP_USER": "alerts",
        "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD": "s3cret",
    }
    notify = notifier_from_env(env)
    assert notify is not None
    notify(Alert("Polaris check no_dead_tasks failed (ERROR)", "2 dead"))
    assert server.logins == [("alerts", "s3cret")]
    assert [m["Subject"] for _, m in server.inbox.messages] == [
        "Polaris check no_dead_tasks failed (ERROR)"
    ]
    # One e-mail path: the same sensors mail run failures and checks alike.
    assert {s.name for s in alert_sensors_from_env(env)} == {
        "polaris_run_failure_alert",
        "polaris_check_failure_alert",
    }


def test_no_login_in_clear_unless_the_link_is_declared_trusted(
    smtp_server: Callable[..., _SmtpServer],
) -> None:
    # A server that takes a login without TLS: what a man in the middle would be.
    server = smtp_server(require_tls=False)
    env = {
        "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com",
        "POLARIS_PIPELINE_ALERT_SMTP_HOST": "127.0.0.1",
        "POLARIS_PIPELINE_ALERT_SMTP_PORT": str(server.port),
        "POLARIS_PIPELINE_ALERT_SMTP_USER": "alerts",
        "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD": "s3cret",
    }
    with pytest.raises(ValueError, match="SMTP_USER='alerts': an SMTP login without STARTTLS"):
        notifier_from_env(env)
    with pytest.raises(ValueError, match="smtp_login_insecure"):
        _login(server.port)
    assert server.logins == [] and server.inbox.messages == []
    trusted = notifier_from_env({**env, "POLARIS_PIPELINE_ALERT_SMTP_LOGIN_INSECURE": "true"})
    assert trusted is not None
    trusted(Alert("t", "b"))
    assert server.logins == [("alerts", "s3cret")] and len(server.inbox.messages) == 1


def test_an_http_webhook_is_refused_unless_allowed(
    webhook: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = webhook
    secret_url = f"{url}/T0/SECRET"
    with pytest.raises(ValueError, match="webhook_allow_http_insecure") as refused:
        notifier_from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": secret_url})
    assert "SECRET" not in str(refused.value) and len(str(refused.value).splitlines()) == 1
    https = notifier_from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": "https://h.example/T0/S"})
    assert https is not None
    [destination] = https.destinations
    assert destination.url.startswith("jsons://h.example/T0/S?")  # apprise's JSON over TLS
    allowed = notifier_from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": secret_url, **_HTTP_OK})
    assert allowed is not None
    allowed(Alert("t", "b"))
    assert received == [{"text": "t\nb"}]


def test_settings_from_env_refuse_bad_values_without_showing_secrets() -> None:
    assert notifier_from_env({}) is None
    assert notifier_from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": "  "}) is None
    with pytest.raises(ValueError, match="an http\\(s\\) URL") as bad_url:
        notifier_from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": "hooks.slack.com/T0/SECRET"})
    assert "SECRET" not in str(bad_url.value)
    with pytest.raises(ValueError, match="e-mail addresses"):
        alert_section({"POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops"})
    with pytest.raises(ValueError, match="SMTP_PORT"):
        alert_section(
            {"POLARIS_PIPELINE_ALERT_EMAIL_TO": "a@b.c", "POLARIS_PIPELINE_ALERT_SMTP_PORT": "x"}
        )
    section = alert_section(
        {
            "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com",
            "POLARIS_PIPELINE_ALERT_SMTP_STARTTLS": "true",
            "POLARIS_PIPELINE_ALERT_SMTP_USER": "alerts",
            "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD": "hunter2",
        }
    )
    email = email_destination(section)
    assert section.smtp_password == "hunter2" and email is not None and "hunter2" in email.url
    assert "hunter2" not in repr(section) and "hunter2" not in repr(destinations_of(section))


def test_no_alert_sensor_until_configured(webhook: tuple[str, list[dict[str, Any]]]) -> None:
    assert alert_sensors(None) == []
    assert alert_sensors_from_env({}) == []
    on = alert_sensors_from_env({"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": webhook[0], **_HTTP_OK})
    assert {s.name for s in on} == {"polaris_run_failure_alert", "polaris_check_failure_alert"}
    assert all(s.default_status is DefaultSensorStatus.RUNNING for s in on)


def test_one_e_mail_path_whatever_the_server(webhook: tuple[str, list[dict[str, Any]]]) -> None:
    # STARTTLS with a login, a plain relay, with a webhook or without: the same two sensors.
    for env in (
        {**_STARTTLS_ENV, "POLARIS_PIPELINE_ALERT_SMTP_PORT": "587"},
        {**_STARTTLS_ENV, "POLARIS_PIPELINE_ALERT_WEBHOOK_URL": webhook[0], **_HTTP_OK},
        {"POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com"},
    ):
        assert {s.name for s in alert_sensors_from_env(env)} == {
            "polaris_run_failure_alert",
            "polaris_check_failure_alert",
        }


def test_a_webhook_keeps_its_own_query_and_secrets_stay_out_of_the_log(
    webhook_server: tuple[str, list[dict[str, Any]], list[str]],
    smtp_server: Callable[..., _SmtpServer],
    root_log: list[str],
) -> None:
    url, received, paths = webhook_server
    server = smtp_server(require_tls=False)
    env = {
        # A Teams-workflow-like URL: its signature is in the query.
        "POLARIS_PIPELINE_ALERT_WEBHOOK_URL": f"{url}/T0/PATHSECRET?api-version=1&sig=QSECRET",
        **_HTTP_OK,
        "POLARIS_PIPELINE_ALERT_EMAIL_TO": "ops@example.com",
        "POLARIS_PIPELINE_ALERT_SMTP_HOST": "127.0.0.1",
        "POLARIS_PIPELINE_ALERT_SMTP_PORT": str(server.port),
        "POLARIS_PIPELINE_ALERT_SMTP_USER": "alerts",
        "POLARIS_PIPELINE_ALERT_SMTP_PASSWORD": "s3cret",
        "POLARIS_PIPELINE_ALERT_SMTP_LOGIN_INSECURE": "true",
    }
    notify = notifier_from_env(env)
    assert notify is not None
    notify(Alert("t", "b"))
    assert paths == ["/hook/T0/PATHSECRET?api-version=1&sig=QSECRET"]
    assert received == [{"text": "t\nb"}] and server.logins == [("alerts", "s3cret")]
    # A failing send: its error and every log line keep the secrets out.
    down = {**env, "POLARIS_PIPELINE_ALERT_SMTP_PORT": "1"}
    down["POLARIS_PIPELINE_ALERT_WEBHOOK_URL"] = "http://127.0.0.1:1/T0/PATHSECRET?sig=QSECRET"
    failing = notifier_from_env(down)
    assert failing is not None
    with pytest.raises(RuntimeError, match="2 alert destination") as failed:
        failing(Alert("t", "b"))
    # The log was listening: urllib3 logged each request, its path masked.
    assert any(line.startswith("urllib3.connectionpool") for line in root_log)
    for text in (str(failed.value), *root_log):
        assert not {"PATHSECRET", "QSECRET", "s3cret"} & set(re.findall(r"\w+", text))


# -- the sensors on real runs ----------------------------------------------------------


@op
def refuses() -> None:
    raise Failure(description="guard refused 1 path(s), first 's3://other/x'")


@job(tags={"polaris/realm": "POLARIS", "polaris/table": "sales.payments"})
def failing_job() -> None:
    refuses()


@op
def deletes_on_a_versioned_bucket() -> Output[int]:
    # A step's metadata as the task job writes it for files a versioned bucket kept.
    result = CleanupResult(deleted=2, bytes_freed=0, retained=2, bytes_retained=10)
    lease = Lease("POLARIS", 7, "exec", 1, 1, 0, name="t7")
    outcome = TaskOutcome(lease, Status.DONE, result=result)
    return Output(2, metadata=DEFAULT_TRANSLATOR.done_metadata(outcome, None))


@op
def then_fails(deleted: int) -> None:
    raise Failure(description="a later child failed")


@job(tags={"polaris/realm": "POLARIS"})
def kept_then_failing_job() -> None:
    then_fails(deletes_on_a_versioned_bucket())


def test_a_failed_run_alert_says_what_versioning_kept(instance: DagsterInstance) -> None:
    result = kept_then_failing_job.execute_in_process(instance=instance, raise_on_error=False)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE
    [failure_event] = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    sent: list[Alert] = []
    sensor = build_polaris_failure_alert(sent.append)
    context = build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure_event,
    ).for_run_failure()
    sensor(context)
    [alert] = sent
    assert (
        "before failing: 2 object(s) deleted; 10 B kept by the bucket's versioning "
        "until its lifecycle expires them"
    ) in alert.body
    assert "freed" not in alert.body


def test_run_failure_sensor_sends_the_failed_run(instance: DagsterInstance) -> None:
    result = failing_job.execute_in_process(instance=instance, raise_on_error=False)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE
    [failure_event] = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    sent: list[Alert] = []
    sensor = build_polaris_failure_alert(sent.append, ui_url="http://ui")
    context = build_run_status_sensor_context(
        sensor_name=sensor.name,
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure_event,
    ).for_run_failure()
    sensor(context)
    [alert] = sent
    assert alert.title == "Dagster run of failing_job failed (sales.payments)"
    assert "realm: POLARIS" in alert.body and alert.url == f"http://ui/runs/{run.run_id}"


def test_a_webhook_at_the_root_path_masks_its_query_not_every_slash(
    webhook_server: tuple[str, list[dict[str, Any]], list[str]], root_log: list[str]
) -> None:
    url, _, paths = webhook_server
    root = url.removesuffix("/hook")
    notify = notifier_from_env(
        {"POLARIS_PIPELINE_ALERT_WEBHOOK_URL": f"{root}/?sig=QSECRET", **_HTTP_OK}
    )
    assert notify is not None
    notify(Alert("t", "b"))
    assert paths == ["/?sig=QSECRET"]
    [request] = [line for line in root_log if '"POST' in line]
    assert "QSECRET" not in request and "HTTP/1.1" in request


def test_the_run_failure_sensor_mails_the_failed_run_over_starttls(
    instance: DagsterInstance, starttls_smtp: tuple[int, _Inbox, list[tuple[str, str]]]
) -> None:
    port, inbox, logins = starttls_smtp
    env = {
        **_STARTTLS_ENV,
        "POLARIS_PIPELINE_ALERT_SMTP_PORT": str(port),
        "POLARIS_PIPELINE_ALERT_UI_URL": "http://ui/",
    }
    [email] = [s for s in alert_sensors_from_env(env) if s.name == RUN_ALERT_NAME]
    result = failing_job.execute_in_process(instance=instance, raise_on_error=False)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status is DagsterRunStatus.FAILURE
    [failure_event] = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    context = build_run_status_sensor_context(
        sensor_name=email.name,
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure_event,
    ).for_run_failure()
    email(context)

    [(recipients, message)] = inbox.messages
    assert recipients == ["ops@example.com"] and logins == [("alerts", "s3cret")]
    assert message["Subject"] == "Dagster run of failing_job failed (sales.payments)"
    body = message.get_payload().splitlines()
    assert "realm: POLARIS" in body
    assert "error: guard refused 1 path(s), first 's3://other/x'" in body
    assert body[-1] == f"http://ui/runs/{run.run_id}"
    # The check alerts go through the same server, the same way.
    notify = notifier_from_env(env)
    assert notify is not None
    notify(Alert("Polaris check no_dead_tasks failed (ERROR)", "2 dead"))
    assert inbox.messages[-1][1]["Subject"] == "Polaris check no_dead_tasks failed (ERROR)"


pytestmark = pytest.mark.lease_policy(max_attempts=1)


def test_check_alert_pages_once_when_a_check_starts_failing(
    metastore: Metastore, instance: DagsterInstance
) -> None:
    def refresh() -> None:
        """A sweep and a watch tick, their check evaluations stored as the daemon stores them."""
        resources = sweeper_resources(metastore_resource(metastore))
        for sensor_def in map(deployed_sensor, (SENSOR_NAME, WATCH_NAME)):
            with build_sensor_context(instance=instance, resources=resources) as context:
                result = sensor_def(context)
            assert isinstance(result, SensorResult)
            for event in result.asset_events:
                instance.report_runless_asset_event(event)

    sent: list[Alert] = []
    sensor = build_polaris_check_alert(sent.append, ui_url="http://ui")
    cursor: list[str | None] = [None]

    def evaluate() -> list[str]:
        """One tick of the alert sensor, its cursor carried from tick to tick."""
        sent.clear()
        with build_sensor_context(instance=instance, cursor=cursor[0]) as context:
            sensor(context)
            cursor[0] = context.cursor
        return sorted(a.title for a in sent)

    def refresh_then_evaluate() -> list[str]:
        refresh()
        return evaluate()

    [task] = seed(metastore, "A", 1, create_timestamp=metastore.now_ms() - 60_000)
    lease = metastore.lease_task("A", task.id, "test-executor")
    assert lease is not None
    metastore.fail(lease, "storage said no")  # max_attempts 1: dead

    # The first failing refresh pages the dead task and the sweeper that never ran.
    assert refresh_then_evaluate() == [
        "Polaris check no_dead_tasks failed (ERROR)",
        "Polaris check sweeper_is_sweeping failed (ERROR)",
    ]
    # Still failing: no second page.
    assert refresh_then_evaluate() == []
    # Fixed, then failing again: paged again.
    metastore.requeue("A", task.id)
    assert refresh_then_evaluate() == []
    lease = metastore.lease_task("A", task.id, "test-executor")
    assert lease is not None
    metastore.fail(lease, "storage said no")
    assert refresh_then_evaluate() == ["Polaris check no_dead_tasks failed (ERROR)"]
    # No run evaluated them: the alert links to the checks' page.
    [alert] = sent
    assert alert.run_id is None
    assert alert.url == "http://ui/assets/polaris_task_backlog?view=checks"
    assert "1 dead-lettered task(s) in realm A" in alert.body
    # A check evaluated in a run (Execute in the UI) counts as well, with its run.
    assert refresh_then_evaluate() == []
    metastore.requeue("A", task.id)
    refresh()
    lease = metastore.lease_task("A", task.id, "test-executor")
    assert lease is not None
    metastore.fail(lease, "storage said no")
    result = materialize(
        [polaris_task_backlog, *BACKLOG_CHECKS],
        instance=instance,
        resources={
            "metastore": metastore_resource(metastore),
            "backlog": BacklogSettings(),
            "sweeper": SweeperSettings(),
        },
    )
    assert evaluate() == ["Polaris check no_dead_tasks failed (ERROR)"]
    assert sent[0].run_id == result.run_id and sent[0].url == f"http://ui/runs/{result.run_id}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("   ", None), (" http://ui:3000/ ", "http://ui:3000/")],
)
def test_the_alerts_ui_address_is_read_blank_as_unset(
    value: str | None, expected: str | None
) -> None:
    env = {} if value is None else {"POLARIS_PIPELINE_ALERT_UI_URL": value}
    assert ui_url_from_env(env) == expected


def test_the_ui_never_sees_an_alert_secret() -> None:
    """What the code server hands the webserver (the repository's snapshot: sensors,
    their descriptions and metadata) holds neither the webhook's secrets nor the
    password."""
    # Tests only: Dagster has no public name for the snapshot the UI reads.
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster._serdes import serialize_value

    from polaris_pipeline.dagster import build_defs

    alerts = AlertSection(
        webhook_url="https://hooks.example.com/T0/PATHSECRET?sig=QSECRET",
        email_to=["ops@example.com"],
        smtp_starttls=True,
        smtp_user="alerts",
        smtp_password="PASSWORDSECRET",
        ui_url="https://dagster.example.com",
    )
    repository = build_defs(alerts=alerts).get_repository_def()
    assert {RUN_ALERT_NAME, "polaris_check_failure_alert"} <= {
        s.name for s in repository.sensor_defs
    }
    snapshot = serialize_value(RepositorySnap.from_def(repository))
    assert "polaris_check_failure_alert" in snapshot
    assert not {"PATHSECRET", "QSECRET", "PASSWORDSECRET"} & set(re.findall(r"\w+", snapshot))


def test_apprise_is_imported_only_to_send_and_its_log_is_held_back_before() -> None:
    """Every run worker loads the code location: apprise is left out until an alert
    needs it, and its logger (which quotes secrets) is held back by its real name."""
    import subprocess
    import sys

    import apprise

    from polaris_pipeline.dagster.alert_delivery import APPRISE_LOGGER_NAME

    assert APPRISE_LOGGER_NAME == apprise.LOGGER_NAME
    assert logging.getLogger(apprise.LOGGER_NAME).propagate is False
    probe = "import sys, definitions; print(sorted(m for m in sys.modules if 'apprise' in m))"
    root = Path(__file__).resolve().parents[1]
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
