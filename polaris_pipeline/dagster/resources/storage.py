"""The ``storage`` resource: where table files live and which prefixes may be deleted.

Either a storage config file (``config_path``, else ``$POLARIS_PIPELINE_STORAGE_CONFIG``,
else no rules), or the same content inline (``locations``, ``allowed_prefixes``).
Secrets belong in the file or inline as ``{env: NAME}``, resolved when the config
is loaded, so neither the UI nor the run config ever shows them.

The loaded config and its ``StorageResolver`` (which keeps filesystem clients) are
cached per process and per configuration, like the metastore.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING, Any

from dagster import ConfigurableResource
from pydantic import Field

from polaris_pipeline.errors import StorageConfigError
from polaris_pipeline.settings import PipelineSettings, SettingsError
from polaris_pipeline.storage.config import CONFIG_ENV_VAR, StorageConfig

if TYPE_CHECKING:
    from polaris_pipeline.storage.resolve import StorageResolver

_cache: dict[tuple[int, str], tuple[StorageConfig, StorageResolver]] = {}
_cache_lock = threading.Lock()


def clear_storage_cache() -> None:
    with _cache_lock:
        _cache.clear()


class PolarisStorageResource(ConfigurableResource):
    """Filesystem options per location prefix, and the prefixes deletion is confined to."""

    config_path: str | None = Field(
        default=None,
        description=(
            "Storage config file (YAML or JSON); null reads $POLARIS_PIPELINE_STORAGE_CONFIG, "
            "and with neither set, no rules apply (local files and the default credential chain)."
        ),
    )
    locations: list[dict[str, Any]] | None = Field(
        default=None,
        description=(
            "Inline instead of a file: [{prefix: s3://bucket/wh, options: {...}}]. "
            "Write secrets as {env: NAME}."
        ),
    )
    allowed_prefixes: list[str] | None = Field(
        default=None,
        description="Inline instead of a file: prefixes outside which nothing is deleted.",
    )
    deletion_record: str | None = Field(
        default=None,
        description=(
            "fsspec URI prefix (s3://audit/polaris-pipeline/, file:///var/log/pp/) under which "
            "every attempt that deletes anything writes the paths it deleted, one JSON Lines "
            "file per attempt, reached through this storage config; null: no record."
        ),
    )

    def _key(self) -> str:
        inline = self.locations is not None or self.allowed_prefixes is not None
        if inline:
            if self.config_path is not None:
                raise StorageConfigError(
                    "storage resource: set either config_path or locations/allowed_prefixes"
                )
            body = {"locations": self.locations or [], "allowed_prefixes": self.allowed_prefixes}
            return "inline:" + json.dumps(body, sort_keys=True, default=repr)
        path = self.config_path or os.environ.get(CONFIG_ENV_VAR) or ""
        return "file:" + path

    def _load(self) -> tuple[StorageConfig, StorageResolver]:
        key = (os.getpid(), self._key())
        with _cache_lock:
            cached = _cache.get(key)
            if cached is None:
                if key[1].startswith("inline:"):
                    config = StorageConfig.from_mapping(
                        {
                            "locations": list(self.locations or []),
                            "allowed_prefixes": list(self.allowed_prefixes or []),
                        },
                        source="storage resource",
                    )
                else:
                    config = StorageConfig.load(key[1].removeprefix("file:") or None)
                # Imported here: the resolver brings in pyiceberg's file IO, which a
                # sensor tick that only checks the config does not need.
                from polaris_pipeline.storage.resolve import StorageResolver

                cached = (config, StorageResolver(config))
                _cache[key] = cached
            return cached

    def get_deletion_record(self) -> str | None:
        """The deletion record's prefix, checked by the setting's own rule; None: off."""
        if self.deletion_record is None:
            return None
        try:
            return PipelineSettings(deletion_record=self.deletion_record).deletion_record
        except SettingsError as exc:
            raise StorageConfigError(f"storage resource: {exc}") from None

    def get_config(self) -> StorageConfig:
        return self._load()[0]

    def get_resolver(self) -> StorageResolver:
        """The process's resolver for this config: its filesystem clients are reused."""
        return self._load()[1]
