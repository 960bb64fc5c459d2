"""This code location's resources: the library's, nothing of its own.

``definitions.py`` configures them from the environment through
``polaris_pipeline.dagster.build_defs_from_env``.
"""

from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisStorageResource,
    SweeperSettings,
)

__all__ = ["PolarisMetastoreResource", "PolarisStorageResource", "SweeperSettings"]
