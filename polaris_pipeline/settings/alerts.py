"""The alerts section: where failed runs and failing backlog checks are sent (opt-in).

No destination, no alert sensor. The webhook URL and the SMTP password are secrets:
they never appear in a repr, a log or an error message, and never travel in clear
unless a setting named ``..._insecure`` says the link is trusted: an ``http://``
webhook is refused, and so is an SMTP login without STARTTLS (whose certificate is
verified against the system's CAs: ``SSL_CERT_FILE`` names a private one's bundle).
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from polaris_pipeline.settings.section import Section, blank_is_none


class AlertSection(Section):
    """A Slack (or Mattermost) incoming webhook and/or e-mail, and the UI's address."""

    # Before the URL and the user: their checks read these.
    webhook_allow_http_insecure: bool = Field(
        default=False,
        description=(
            "Accept an http:// webhook URL, whose secret then travels in clear: only on a "
            "network you trust."
        ),
    )
    smtp_starttls: bool = Field(
        default=False,
        description=(
            "Start TLS, verifying the server's certificate and name against the system's "
            "CAs (SSL_CERT_FILE's, when set) before any login."
        ),
    )
    smtp_login_insecure: bool = Field(
        default=False,
        description=(
            "Log in without STARTTLS, the password in clear: only on a link you trust "
            "(a relay on the same host). Without it such a login is refused."
        ),
    )
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
    ui_url: str | None = Field(
        default=None, description="The Dagster UI's base URL, for the links in alerts."
    )

    @field_validator("webhook_url")
    @classmethod
    def _webhook(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The URL is a secret: never shown.
        if value is None:
            return None
        url = value.strip()
        if not url.lower().startswith(("https://", "http://")):
            raise ValueError("an http(s) URL")
        if url.lower().startswith("http://") and not info.data.get("webhook_allow_http_insecure"):
            raise ValueError(
                "an http:// webhook sends its secret in clear: use https://, or set "
                "webhook_allow_http_insecure for a network you trust"
            )
        return url

    @field_validator("smtp_user")
    @classmethod
    def _login(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Refused: the password would travel in clear.
        trusted = info.data.get("smtp_starttls") or info.data.get("smtp_login_insecure")
        if value and not trusted:
            raise ValueError(
                "an SMTP login without STARTTLS sends the password in clear: set smtp_starttls, "
                "or smtp_login_insecure for a link you trust"
            )
        return value

    @field_validator("email_to")
    @classmethod
    def _addresses(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        addresses = [a.strip() for a in value if a.strip()]
        if not addresses or not all("@" in a for a in addresses):
            raise ValueError("a comma-separated list of e-mail addresses")
        return addresses

    # Blank is unset, as a blank variable is: a YAML block's " " is not a host or a link.
    _ui_url = field_validator("ui_url")(blank_is_none)

    # (Whether the sender is an address is apprise's to say, when the destinations load.)
    @field_validator("email_from", "smtp_host")
    @classmethod
    def _text(cls, value: str, info: ValidationInfo) -> str:
        return value.strip() or str(cls.model_fields[str(info.field_name)].default)

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
