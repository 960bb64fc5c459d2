"""Dagster resources of the polaris-pipeline code location: thin wrappers of the engine."""

from resources.metastore import PolarisMetastoreResource, clear_metastore_cache
from resources.storage import PolarisStorageResource, clear_storage_cache
from resources.sweeper import SweeperSettings

__all__ = [
    "PolarisMetastoreResource",
    "PolarisStorageResource",
    "SweeperSettings",
    "clear_metastore_cache",
    "clear_storage_cache",
]
