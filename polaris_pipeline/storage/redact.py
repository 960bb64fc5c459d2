"""Keep credentials out of reprs, logs and error messages."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"

# Substrings of option names whose values are treated as secret. "key" is broad on
# purpose: s3fs calls the access key id ``key``; masking a harmless value is cheaper
# than printing a credential.
SECRET_NAME_PARTS = ("secret", "key", "token", "password", "credential")


def looks_secret(name: object) -> bool:
    """Whether an option named ``name`` probably holds a credential."""
    lowered = str(name).lower()
    return any(part in lowered for part in SECRET_NAME_PARTS)


def mask_options(options: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of ``options`` whose secret-looking values are replaced by ``***``.

    Nested mappings and lists (``client_kwargs``, ``config_kwargs``) are masked too.
    """
    return {k: MASK if looks_secret(k) else _mask_value(v) for k, v in options.items()}


def _mask_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return mask_options(value)
    if isinstance(value, list | tuple):
        return type(value)(_mask_value(v) for v in value)
    return value


def secret_values(options: Mapping[Any, Any]) -> list[str]:
    """Every string value held under a secret-looking name, at any depth."""
    found: list[str] = []

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, secret or looks_secret(k))
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v, secret)
        elif secret and isinstance(value, str) and value:
            found.append(value)

    walk(options, False)
    return found


def maskable(values: Iterable[str]) -> list[str]:
    """Values worth masking: a one- or two-letter one would mask every such letter of
    a message instead (and STS refuses external ids that short anyway)."""
    return [v for v in values if len(v) >= 4]


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each non-empty secret replaced by ``***``."""
    # Longest first, so a secret that contains another is masked whole.
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
