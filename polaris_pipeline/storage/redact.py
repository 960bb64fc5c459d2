"""Keep credentials out of reprs, logs, errors and output: the one definition of a secret.

``redact`` masks known secret values and secret shapes in a text (a URL's password, a
secret-named ``name=value`` or ``"name": "value"``, ``AccountKey=``, a SAS's ``sig=``);
``mask_options`` masks a structure; ``masked_repr_args`` is pydantic's repr through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MASK = "***"

# Substrings of option names whose values are treated as secret. "key" is broad on
# purpose: s3fs calls the access key id ``key``; masking a harmless value is cheaper
# than printing a credential. "signature": a connection string's
# SharedAccessSignature; "connection_string": adlfs's, which holds an account key or
# a SAS; "externalid": the shared secret of an AWS role a catalog assumes.
SECRET_NAME_PARTS = (
    "secret",
    "key",
    "token",
    "password",
    "credential",
    "signature",
    "connection_string",
    "connectionstring",
    "externalid",
    "external_id",
)
# Whole names too short to be matched as parts: a SAS's signature, libpq's and ODBC's
# password spellings.
SECRET_NAMES = frozenset({"sig", "pwd", "passwd", "pass"})

# Every secret-looking name holds one of these: a text without any has no such name.
_NAME_HINTS = (*SECRET_NAME_PARTS, *SECRET_NAMES)
# A URL's userinfo password: scheme://user:PASSWORD@host.
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/?#@:]*:)([^\s/?#@]+)@")
# name=value, as in a URL query, a connection string or libpq's key=value form. The
# name must start the text or follow a separator (so ``xsig=`` is not ``sig=``), not a
# slash: a Hive-style partition directory (``data/api_key=7/``) is a path, kept whole.
_ASSIGNED = re.compile(r"""(?<![\w.\-/])([A-Za-z_][\w.\-]*)=('[^']*'|"[^"]*"|[^&;\s'"]+)""")
# "name": "value" (JSON) or 'name': 'value' (a Python dict's repr).
_QUOTED_PAIR = re.compile(r"""(["'])([A-Za-z_][\w.\-]*)\1(\s*:\s*)(["'])(.*?)(?<!\\)\4""")


def looks_secret(name: object) -> bool:
    """Whether an option named ``name`` probably holds a credential."""
    lowered = str(name).lower()
    return lowered in SECRET_NAMES or any(part in lowered for part in SECRET_NAME_PARTS)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every occurrence of each non-empty secret, and every secret-shaped
    part (a URL's password, a secret-named assignment or JSON pair), replaced by ``***``."""
    # Longest first, so a secret that contains another is masked whole.
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    # Each pattern only where it can match: a deletion record passes every line here.
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    lowered = text.lower()
    if not any(part in lowered for part in _NAME_HINTS):
        return text
    if "=" in text:
        text = _ASSIGNED.sub(
            lambda m: f"{m.group(1)}={MASK}" if looks_secret(m.group(1)) else m.group(0), text
        )
    if ":" in text:
        text = _QUOTED_PAIR.sub(
            lambda m: (
                f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{MASK}{m.group(4)}"
                if looks_secret(m.group(2))
                else m.group(0)
            ),
            text,
        )
    return text


def mask_options(options: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of ``options`` with secret-looking values as ``***``, nested mappings and lists
    (``client_kwargs``, ``config_kwargs``) too, and every string through ``redact``.
    """
    return {k: MASK if looks_secret(k) and v else mask_value(v) for k, v in options.items()}


def mask_value(value: Any) -> Any:
    """``value`` masked as ``mask_options`` masks an option's value."""
    if isinstance(value, Mapping):
        return mask_options(value)
    if isinstance(value, list | tuple):
        return type(value)(mask_value(v) for v in value)
    if isinstance(value, str):
        return redact(value)
    return value


def masked_repr_args(args: Iterable[tuple[str | None, Any]]) -> Iterator[tuple[str | None, Any]]:
    """pydantic's ``__repr_args__`` with each field masked as an option of its name."""
    for name, value in args:
        if name is not None and looks_secret(name) and value:
            yield name, MASK
        else:
            yield name, mask_value(value)


def secret_values(options: Mapping[Any, Any]) -> list[str]:
    """Every string value held under a secret-looking name, at any depth, and the
    secret parts of each (a connection string's ``AccountKey=...``)."""
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
            found.extend(v.strip("'\"") for k, v in _ASSIGNED.findall(value) if looks_secret(k))

    walk(options, False)
    return found


def maskable(values: Iterable[str]) -> list[str]:
    """Values worth masking: a one- or two-letter one would mask every such letter of
    a message instead (and STS refuses external ids that short anyway)."""
    return [v for v in values if len(v) >= 4]
