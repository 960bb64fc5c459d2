"""The alerts section: where failed runs and failing backlog checks are sent (opt-in).

No destination, no alert sensor. The webhook URL and the SMTP password are secrets:
they never appear in a repr, a log or an error message.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from polaris_pipeline.settings.section import Section


class AlertSection(Section):
    """A Slack (or Mattermost) incoming webhook and/or e-mail, and the UI's address."""

    webhook_url: str | None = Field(
        default=None,
        repr=False,
        description='An incoming webhook (Slack, Mattermost): {"text": ...} is POSTed to it.',
    )
    email_to: list[str] | None = Field(
        default=None, description="Addresses alerts are mailed to; null: no e-mail."
    )
    email_from: str = Field(default="polaris-pipeline@localhost", description="The sender.")
    smtp_host: str = Field(default="localhost", description="The SMTP server.")
    smtp_port: int = Field(default=25, description="Its port.")
    smtp_user: str | None = Field(default=None, description="Its login, if it asks for one.")
    smtp_password: str | None = Field(default=None, repr=False, description="Its password.")
    smtp_starttls: bool = Field(
        default=False,
        description=(
            "Start TLS; with a user, failed runs are mailed by Dagster's own "
            "make_email_on_run_failure_sensor."
        ),
    )
    ui_url: str | None = Field(
        default=None, description="The Dagster UI's base URL, for the links in alerts."
    )

    @field_validator("webhook_url")
    @classmethod
    def _webhook(cls, value: str | None) -> str | None:
        if value is not None and not value.strip().startswith(("https://", "http://")):
            raise ValueError("an http(s) URL")  # the URL is a secret: not shown
        return value.strip() if value is not None else None

    @field_validator("email_to")
    @classmethod
    def _addresses(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        addresses = [a.strip() for a in value if a.strip()]
        if not addresses or not all("@" in a for a in addresses):
            raise ValueError("a comma-separated list of e-mail addresses")
        return addresses

    @field_validator("smtp_port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 0 < value < 65536:
            raise ValueError("a port between 1 and 65535")
        return value

    @property
    def configured(self) -> bool:
        """Whether any destination is set (else: no alert sensor)."""
        return self.webhook_url is not None or self.email_to is not None
