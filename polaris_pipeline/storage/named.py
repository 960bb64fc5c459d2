"""Named credential sources: what a catalog's ``storageName`` means to this sweeper.

Polaris 1.4+ with the realm flag ``RESOLVE_CREDENTIALS_BY_STORAGE_NAME`` signs with the
server-side credentials configured under a catalog's ``storageName``. The sweeper cannot
read Polaris's configuration, so the storage config says it per name::

    storage_names:
      analytics:                      # the catalog's storageName
        key: {env: ANALYTICS_AWS_KEY}  # the identity that calls AssumeRole (S3)
        secret: {env: ANALYTICS_AWS_SECRET}
      shared:
        default_identity: true        # signs with the sweeper's own identity

An unlisted name fails the task (``unmapped``): the default identity could reach storage
with credentials Polaris would not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from polaris_pipeline.errors import StorageConfigError, StorageError
from polaris_pipeline.settings.section import nearest
from polaris_pipeline.storage.redact import MASK

# The storage config's key, and the catalog field it maps (named in messages).
STORAGE_NAMES_KEY = "storage_names"
STORAGE_NAME_FIELD = "storageName"
_KEYS = ("key", "secret", "token", "default_identity")


@dataclass(frozen=True, repr=False)
class NamedIdentity:
    """The credentials one ``storageName`` signs with; no keys: the default identity."""

    name: str
    key: str | None = None
    secret: str | None = None
    token: str | None = None

    @property
    def default_identity(self) -> bool:
        return self.key is None

    def secrets(self) -> list[str]:
        return [v for v in (self.key, self.secret, self.token) if v]

    def __repr__(self) -> str:
        held = "default identity" if self.default_identity else f"key={MASK!r}"
        return f"NamedIdentity(name={self.name!r}, {held})"


def parse_named_identities(value: object, where: str) -> dict[str, NamedIdentity]:
    """The ``storage_names`` block (``{env: NAME}`` values already resolved)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StorageConfigError(f"{where} must be a mapping of storageName to credentials")
    out: dict[str, NamedIdentity] = {}
    for name, entry in value.items():
        at = f"{where}.{name}"
        if not isinstance(name, str) or not name:
            raise StorageConfigError(f"{where}: each name must be a non-empty string")
        out[name] = _identity(name, entry, at)
    return out


def _identity(name: str, entry: Any, at: str) -> NamedIdentity:
    if not isinstance(entry, Mapping):
        raise StorageConfigError(f"{at} must be a mapping (key and secret, or default_identity)")
    unknown = sorted(str(k) for k in set(entry) - set(_KEYS))
    if unknown:
        hint = nearest(unknown[0], _KEYS) or f" (expected {', '.join(repr(k) for k in _KEYS)})"
        raise StorageConfigError(f"{at}: unknown key {unknown[0]!r}{hint}")
    default = entry.get("default_identity", False)
    if not isinstance(default, bool):
        raise StorageConfigError(f"{at}.default_identity must be true or false")
    texts = {k: entry.get(k) for k in ("key", "secret", "token")}
    for key, text in texts.items():
        if text is not None and (not isinstance(text, str) or not text):
            # Names the key, never the value.
            raise StorageConfigError(f"{at}.{key} must be a non-empty string")
    if default and any(text is not None for text in texts.values()):
        raise StorageConfigError(f"{at}: default_identity: true takes no key, secret or token")
    if not default and not (texts["key"] and texts["secret"]):
        raise StorageConfigError(f"{at} needs both key and secret, or default_identity: true")
    if default:
        return NamedIdentity(name)
    return NamedIdentity(name, texts["key"], texts["secret"], texts["token"])


def unmapped(name: str, storage_type: str) -> StorageError:
    """The one line a task whose catalog names an unmapped ``storageName`` fails with."""
    return StorageError(
        f"the catalog's {storage_type} storage configuration has {STORAGE_NAME_FIELD} "
        f"{name!r}, which the storage config does not map: add {STORAGE_NAMES_KEY}: "
        f"{{{name}: {{key: ..., secret: ...}}}} (or {{{name}: {{default_identity: true}}}}) "
        "to the storage config"
    )
