"""Dagster resources of the polaris-pipeline code location: thin wrappers of the engine."""

from polaris_pipeline.dagster.resources.metastore import (
    GuardConfig,
    PolarisMetastoreResource,
    clear_metastore_cache,
)
from polaris_pipeline.dagster.resources.restore import PolarisRestoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource, clear_storage_cache
from polaris_pipeline.dagster.resources.sweeper import SweeperSettings

__all__ = [
    "GuardConfig",
    "PolarisMetastoreResource",
    "PolarisRestoreResource",
    "PolarisStorageResource",
    "SweeperSettings",
    "clear_metastore_cache",
    "clear_storage_cache",
]
