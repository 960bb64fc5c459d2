"""The ``storage`` resource: where table files live and which prefixes may be deleted.

A config file (``config_path``, else ``$POLARIS_PIPELINE_STORAGE_CONFIG``, else no rules)
or the same content inline; secrets as ``{env: NAME}``, resolved at load, so neither the
UI nor run config shows them. Config and ``StorageResolver`` are cached per process and
configuration.
"""

from __future__ import annotations

import json
import os
import threading
from typing import TYPE_CHECKING

from dagster import ConfigurableResource

from polaris_pipeline.settings import StorageSection, setting_from_env
from polaris_pipeline.storage.config import StorageConfig

if TYPE_CHECKING:
    from polaris_pipeline.storage.resolve import StorageResolver

_cache: dict[tuple[int, str], tuple[StorageConfig, StorageResolver]] = {}
_cache_lock = threading.Lock()


def clear_storage_cache() -> None:
    with _cache_lock:
        _cache.clear()


class PolarisStorageResource(ConfigurableResource, StorageSection):
    """Filesystem options per location prefix, and the prefixes deletion is confined to
    (``StorageSection``'s fields); no ``config_path`` reads ``$POLARIS_PIPELINE_STORAGE_CONFIG``.
    """

    def _load(self) -> tuple[StorageConfig, StorageResolver]:
        body = self.inline()
        path = self.config_path or setting_from_env("storage", "config_path")
        # Cached per process and per what is loaded: the inline content, or the file's path.
        source = json.dumps(body, sort_keys=True, default=repr) if body is not None else path or ""
        key = (os.getpid(), ("inline:" if body is not None else "file:") + source)
        with _cache_lock:
            cached = _cache.get(key)
            if cached is None:
                config = (
                    StorageConfig.from_mapping(body, source="storage resource")
                    if body is not None
                    else StorageConfig.load(path)
                    if path
                    else StorageConfig()
                )
                # Imported here: the resolver brings in pyiceberg's file IO, which a
                # sensor tick that only checks the config does not need.
                from polaris_pipeline.storage.resolve import StorageResolver

                cached = (config, StorageResolver(config))
                _cache[key] = cached
            return cached

    def get_config(self) -> StorageConfig:
        return self._load()[0]

    def get_resolver(self) -> StorageResolver:
        """The process's resolver for this config: its filesystem clients are reused."""
        return self._load()[1]
