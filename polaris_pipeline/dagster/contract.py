"""The task job's contract: what its runs carry, declared once and versioned.

Everything that reads or makes a task run (sweeper, run report, alerts, backfill,
operators' scripts and queue rules) meets it through these names: run tags (public, never
renamed), run keys (``run_key`` alone), the run config (``TaskRunConfig``), step names
(``ROOT_STEP``, ``child_step``, ``gate_step``, ``stage_output``, ``FINISH_STEP``; the last
added in version 2: an older run re-executes with it skipped).

Every run carries ``polaris/contract``, the version that made it (1: before the tag, read
as 2). A run of an unknown version fails at its first step naming both
(``check_run_contract``). Renaming a step, config field or tag value must bump
``CONTRACT_VERSION`` and say here how older runs are read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import Config, Failure
from pydantic import Field

from polaris_pipeline.tasks.orphans import CandidateRun

CONTRACT_VERSION = 2
# Runs made before the version was tagged read as version 1.
UNTAGGED_VERSION = 1
# Versions whose runs this code re-executes: 1 differs from 2 only by the tag.
READABLE_VERSIONS = frozenset({1, 2})

JOB_NAME = "polaris_task_job"

# ------------------------------------------------------------------ run tags

# The tag Dagster files a RunRequest's run key under. Dagster 1.13 exports no public
# name for it, only a private one (test_dagster_contract holds the two equal).
RUN_KEY_TAG = "dagster/run_key"
TAG_CONTRACT = "polaris/contract"
TAG_REALM = "polaris/realm"
TAG_TASK_ID = "polaris/task_id"
TAG_TASK_TYPE = "polaris/task_type"
TAG_ATTEMPT = "polaris/attempt"
TAG_EXECUTOR = "polaris/executor"
# "sweeper" on the runs the sensor requests; absent on an operator's launch.
TAG_LAUNCHED_BY = "polaris/launched_by"
LAUNCHED_BY_SWEEPER = "sweeper"
# How the run ended when it was not a plain failure: done, skipped (a sweeper's run
# found its task taken or gone: nothing done), lease-lost, restored.
TAG_OUTCOME = "polaris/outcome"
OUTCOME_DONE = "done"
OUTCOME_SKIPPED = "skipped"
OUTCOME_LEASE_LOST = "lease-lost"
OUTCOME_RESTORED = "restored"  # the dropped table is live again: purge ended, nothing deleted
# On a run of the orphaned children of one purge: its task type, the parent task's
# name, how many tasks.
ORPHANED_CHILDREN = "orphaned_children"
TAG_ORPHANS_OF = "polaris/orphans_of"
TAG_TASK_COUNT = "polaris/tasks"
# How the run started its task when it was not a plain lease (operator retry, adoption).
TAG_START = "polaris/start"
# The table a run cleans up (reporting.py reads them back for the catalog's event).
TAG_TABLE = "polaris/table"
TAG_CATALOG = "polaris/catalog_id"
TAG_LOCATION = "polaris/table_location"
# The run's total, written by the run report sensor once the run ended.
TAG_TOTAL = "polaris/total"
# Tags longer than this are refused by Dagster: values are cut to it.
TAG_MAX = 255
# Set by Dagster: every re-execution and run retry has a parent and a root; only
# the daemon's automatic run retries have a retry number (it is not inherited).
PARENT_RUN_ID_TAG = "dagster/parent_run_id"
ROOT_RUN_ID_TAG = "dagster/root_run_id"
RETRY_NUMBER_TAG = "dagster/retry_number"
# Read by Dagster's run queue: the highest first, unset is 0.
PRIORITY_TAG = "dagster/priority"

# The job's own tags, so every run has them. Run retries (needs run_retries enabled
# in dagster.yaml): a run whose process died is retried from the failed steps; the
# new run adopts the lease (its executor id is its root run's). Op failures are
# retried by the op RetryPolicy and then recorded in the task row, so a run retry
# after one would only find the task backing off: run retries are for dead workers.
DEFAULT_RUN_TAGS = {
    TAG_CONTRACT: str(CONTRACT_VERSION),
    "dagster/max_retries": "2",
    "dagster/retry_on_asset_or_op_failure": "false",
}

# ---------------------------------------------------------------- step names

ROOT_STEP = "run_polaris_task"
OUTCOME_OUTPUT = "outcome"
# A dropped table's last step, after its last stage: its unreferenced files, then
# its row completed (``Runner.finish_table``); fed by the root's ``table`` output.
FINISH_STEP = "finish_polaris_table"
FINISH_OUTPUT = "table"


def stage_output(stage_name: str) -> str:
    """The root step's output that hands out one stage's children."""
    return f"{stage_name}_children"


def child_step(stage_name: str) -> str:
    """The mapped step that runs one stage's children, a group at a time."""
    return f"run_{stage_name}_children"


def gate_step(stage_name: str) -> str:
    """The step that releases a stage once every step of the stage before is done."""
    return f"release_{stage_name}_children"


# ------------------------------------------------------------------ version


class ContractMismatch(Failure):
    """A run made under a contract version this code does not read (not retried)."""

    def __init__(self, version: str) -> None:
        super().__init__(
            description=(
                f"run made by task job contract version {version} ({TAG_CONTRACT}); this "
                f"code location runs version {CONTRACT_VERSION} and reads versions "
                f"{', '.join(str(v) for v in sorted(READABLE_VERSIONS))}: launch a new run "
                "of the task instead of re-executing this one"
            ),
            allow_retries=False,
        )


def check_run_contract(tags: Mapping[str, str]) -> None:
    """Raise ``ContractMismatch`` unless this code reads runs of the run's version."""
    version = (tags.get(TAG_CONTRACT) or "").strip() or str(UNTAGGED_VERSION)
    if not (version.isdigit() and int(version) in READABLE_VERSIONS):
        raise ContractMismatch(version[:40])


# ---------------------------------------------------------------- run config

# Children per mapped step (see TaskRunConfig.children_per_step).
CHILDREN_PER_STEP = 20


class TaskRunConfig(Config):
    """Which task the run cleans up: all the launchpad asks for. ``task_id`` is text: Polaris's
    63-bit ids exceed a JavaScript number, and the run config passes through the UI.
    """

    realm_id: str = Field(description="Realm of the task.")
    task_id: str = Field(description="Polaris entity id of the task (decimal text).")
    entity_version: int | None = Field(
        default=None,
        description=(
            "entity_version of the row when the sweeper selected it (it names the run key); "
            "for information only: the run leases whatever the row is when it starts."
        ),
    )
    children_per_step: int = Field(
        default=CHILDREN_PER_STEP,
        ge=1,
        description=(
            "Child tasks a table cleanup's children are grouped by, one step per group: "
            "a step costs Dagster about a tenth of a second, a small manifest less."
        ),
    )
    task_ids: list[str] = Field(
        default_factory=list,
        description=(
            "Orphaned children of one table's purge (the parent row gone), run together: "
            "every task id of the group, each leased, fenced and recorded on its own row by "
            "the child steps. Empty for a single task."
        ),
    )


def task_number(raw: str) -> int:
    """A task id of the run config as a number; a non-retried Failure if it is not one."""
    try:
        return int(raw.strip())
    except ValueError:
        raise Failure(
            description=f"task_id {raw[:40]!r} is not a decimal task id", allow_retries=False
        ) from None


def run_config_for(
    realm_id: str,
    task_id: int | str,
    *,
    entity_version: int | None = None,
    children_per_step: int | None = None,
    task_ids: Sequence[int | str] = (),
) -> dict[str, Any]:
    """Run config of the task job for one task (or, with ``task_ids``, a group)."""
    config: dict[str, Any] = {"realm_id": realm_id, "task_id": str(task_id)}
    if entity_version is not None:
        config["entity_version"] = entity_version
    if children_per_step is not None:
        config["children_per_step"] = children_per_step
    if task_ids:
        config["task_ids"] = [str(t) for t in task_ids]
    return {"ops": {ROOT_STEP: {"config": config}}}


def _root_config(run_config: Mapping[str, Any]) -> Mapping[str, Any]:
    try:
        config = run_config["ops"][ROOT_STEP]["config"]
    except (KeyError, TypeError):
        return {}
    return config if isinstance(config, Mapping) else {}


def run_task_ids(run_config: Mapping[str, Any]) -> list[str]:
    """The task ids a run of the task job works on (its own, or its group's)."""
    config = _root_config(run_config)
    try:
        return [str(config["task_id"]), *(str(t) for t in config.get("task_ids") or [])]
    except (KeyError, TypeError):
        return []


def is_group_run(run_config: Mapping[str, Any]) -> bool:
    """A run of the orphaned children of one purge (its config lists ``task_ids``)."""
    return bool(_root_config(run_config).get("task_ids"))


# ------------------------------------------------------------------ run keys


def run_key(run: CandidateRun, *, again_at_ms: int | None = None) -> str:
    """The run key of the sweeper's request for ``run``: the one place keys are made.

    - one task: ``<realm>:<task id>:<entity_version>``: Dagster drops a repeat while the task
      waits; every lease, failure, renewal or requeue bumps the version;
    - orphans of one purge: ``<realm>:orphans:<parent name>:<digest>`` over members' ids and
      versions;
    - ``again_at_ms``: ``<key>:again:<ms>`` (``sweeper._relaunch_used_keys``).
    """
    first = run.first
    if run.parent_name is None:
        key = f"{first.realm_id}:{first.id}:{first.entity_version}"
    else:
        members = sorted(run.tasks, key=lambda t: t.id)
        versions = ",".join(f"{t.id}:{t.entity_version}" for t in members)
        digest = hashlib.sha256(versions.encode()).hexdigest()[:16]
        key = f"{first.realm_id}:orphans:{run.parent_name}:{digest}"
    return key if again_at_ms is None else f"{key}:again:{again_at_ms}"
