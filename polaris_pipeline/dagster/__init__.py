"""The Dagster integration of polaris-pipeline::

    from polaris_pipeline.dagster import PolarisMetastoreResource, build_defs
    defs = build_defs(metastore=PolarisMetastoreResource(url=..., realms=["POLARIS"]))

or one ``defs.yaml`` (``type: polaris_pipeline.dagster.PolarisSweeper``). The pieces are
importable for projects composing their own ``Definitions``; ``PolarisTranslator`` decides
what the UI shows of a task; ``contract.py`` names what every run carries.
"""

from polaris_pipeline.dagster.component import PolarisSweeper
from polaris_pipeline.dagster.definitions import (
    build_defs,
    build_defs_from_env,
)
from polaris_pipeline.dagster.leaks import LeakSettings, polaris_leaked_roots
from polaris_pipeline.dagster.resources import (
    PolarisMetastoreResource,
    PolarisRestoreResource,
    PolarisStorageResource,
    SweeperSettings,
)
from polaris_pipeline.dagster.retention import RetentionSettings
from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.settings import TASK_EXECUTOR_ENV, TaskExecutor

__all__ = [
    "TASK_EXECUTOR_ENV",
    "LeakSettings",
    "PolarisMetastoreResource",
    "PolarisRestoreResource",
    "PolarisStorageResource",
    "PolarisSweeper",
    "PolarisTranslator",
    "RetentionSettings",
    "SweeperSettings",
    "TaskExecutor",
    "build_defs",
    "build_defs_from_env",
    "polaris_leaked_roots",
]
