"""What every command starts from: its exit codes, its settings, its metastore, a named task.

Settings come from the environment (``polaris_pipeline.settings``, the same
variables the Dagster code location reads); a flag overrides its variable.
Read-only commands open the metastore read-only: they never create or change
anything.
"""

from __future__ import annotations

import argparse
import sys

from polaris_pipeline.cli.setting_flags import flagged_settings
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.connection import make_engine, resolve_url
from polaris_pipeline.settings import PipelineSettings
from polaris_pipeline.storage.config import UNBOUNDED_WARNING, StorageConfig
from polaris_pipeline.tasks.formatting import realms_text
from polaris_pipeline.tasks.model import TaskPolicy, TaskRow
from polaris_pipeline.tasks.release import PolarisRelease, untested_warning

# 0 success, 1 a task run or swept failed, 2 bad input or unreachable services.
EXIT_OK, EXIT_TASK_FAILED, EXIT_ERROR = 0, 1, 2


def settings_for(args: argparse.Namespace) -> PipelineSettings:
    """The environment's settings with this command's flags on top."""
    changes, labels = flagged_settings(args)
    # --set first: a flag of its own is the more specific.
    settings = (
        PipelineSettings.from_env(warn=_warn)
        .with_assignments(getattr(args, "assignments", None) or [])
        .with_overrides(changes, labels)
    )
    release = settings.metastore.polaris_version
    warning = untested_warning(PolarisRelease.parse(release)) if release else None
    if warning:
        _warn(warning)
    return settings


def _warn(warning: str) -> None:
    # Every warning of the CLI, on stderr, not in the log: without -v the log says nothing.
    print(f"polaris-pipeline: warning: {warning}", file=sys.stderr)


def open_metastore(settings: PipelineSettings, *, read_only: bool) -> Metastore:
    """The metastore; ``read_only`` for commands that must not create or change anything."""
    policy = TaskPolicy.from_section(settings.metastore)
    bound = settings.guard.bound_s
    if not read_only:
        return Metastore(settings.metastore.url, policy=policy, guard_bound_s=bound)
    engine = make_engine(resolve_url(settings.metastore.url), read_only=True)
    return Metastore(policy=policy, engine=engine, guard_bound_s=bound)


def checked_metastore(settings: PipelineSettings, *, read_only: bool) -> Metastore:
    """``open_metastore``, its schema checked: what every command but ``init`` starts with."""
    store = open_metastore(settings, read_only=read_only)
    store.check_schema()
    return store


def storage_config(settings: PipelineSettings) -> StorageConfig:
    """The storage config the settings give (their rules inline, else the file they name),
    else the default (fsspec's own options)."""
    body = settings.storage.inline()
    if body is not None:
        return StorageConfig.from_mapping(body, source="storage settings")
    path = settings.storage.config_path
    return StorageConfig.load(path) if path else StorageConfig()


def warn_if_unbounded(config: StorageConfig) -> None:
    """At the start of a command that deletes: without allowed_prefixes, say on stderr
    (once) that only the catalogs' own locations bound the deletes."""
    if not config.allowed_prefixes:
        _warn(UNBOUNDED_WARNING)


def find_task(
    store: Metastore, task_id: int, realm: str | None, realms: list[str] | None
) -> TaskRow:
    """The task ``task_id``: in ``realm``, else in the one realm (of ``realms``) that has it."""
    if realm is not None:
        task = store.get_task(realm, task_id)
        if task is None:
            raise PolarisPipelineError(f"no task {task_id} in realm {realm!r}")
        return task
    searched = realms if realms is not None else store.realms()
    found = [t for r in searched if (t := store.get_task(r, task_id)) is not None]
    if not found:
        raise PolarisPipelineError(f"no task {task_id} in {realms_text(searched or None)}")
    if len(found) > 1:
        names = ", ".join(t.realm_id for t in found)
        raise PolarisPipelineError(
            f"task id {task_id} is in several realms ({names}): pass --realm"
        )
    return found[0]
