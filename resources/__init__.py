"""This code location's resources: the library's, nothing of its own.

``resources.location`` configures them from the environment (the library's reading,
``deployment_from_env``); ``definitions.py`` composes them with the rest.
"""

from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)

__all__ = ["PolarisMetastoreResource", "PolarisStorageResource", "SweeperSettings"]
