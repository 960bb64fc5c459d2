"""Every setting of the engine, one typed schema of nested sections.

The command line, ``build_defs``, the ``PolarisSweeper`` component and the
environment (read by pydantic-settings, ``settings/env.py``) all build these sections;
the Dagster resources are the same models with Dagster's base added
(``polaris_pipeline/dagster/resources``). Each field, default and rule is written once,
in its section's module.
"""

from polaris_pipeline.settings.alerts import AlertSection
from polaris_pipeline.settings.backlog import BacklogSection
from polaris_pipeline.settings.env import ENV_VARIABLES, env_variable
from polaris_pipeline.settings.executor import ExecutorSection, TaskExecutor
from polaris_pipeline.settings.guard import GuardSection
from polaris_pipeline.settings.leaks import LeakSection
from polaris_pipeline.settings.metastore import MetastoreSection
from polaris_pipeline.settings.pipeline import (
    PipelineSettings,
    executor_settings,
    setting_from_env,
)
from polaris_pipeline.settings.restore import RestoreSection
from polaris_pipeline.settings.retention import RetentionSection
from polaris_pipeline.settings.section import Section, SettingsError
from polaris_pipeline.settings.storage import CONFIG_ENV_VAR, StorageSection
from polaris_pipeline.settings.sweeper import SweeperSection

REALMS_ENV = ENV_VARIABLES[("metastore", "realms")]
LEASE_TIMEOUT_ENV = ENV_VARIABLES[("metastore", "lease_timeout_ms")]
GRACE_ENV = ENV_VARIABLES[("metastore", "grace_ms")]
MAX_ATTEMPTS_ENV = ENV_VARIABLES[("metastore", "max_attempts")]
URL_ENV = ENV_VARIABLES[("metastore", "url")]
GUARD_BOUND_ENV = ENV_VARIABLES[("guard", "bound_s")]
TASK_EXECUTOR_ENV = ENV_VARIABLES[("executor", "task_executor")]

__all__ = [
    "CONFIG_ENV_VAR",
    "ENV_VARIABLES",
    "GRACE_ENV",
    "GUARD_BOUND_ENV",
    "LEASE_TIMEOUT_ENV",
    "MAX_ATTEMPTS_ENV",
    "REALMS_ENV",
    "TASK_EXECUTOR_ENV",
    "URL_ENV",
    "AlertSection",
    "BacklogSection",
    "ExecutorSection",
    "GuardSection",
    "LeakSection",
    "MetastoreSection",
    "PipelineSettings",
    "RestoreSection",
    "RetentionSection",
    "Section",
    "SettingsError",
    "StorageSection",
    "SweeperSection",
    "TaskExecutor",
    "env_variable",
    "executor_settings",
    "setting_from_env",
]
