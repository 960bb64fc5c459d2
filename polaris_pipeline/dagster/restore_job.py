"""``polaris_restore_table_job``: ``tasks restore`` as a Dagster job, the same config.

Launched by an operator with ``ops.polaris_restore_table.config`` naming the task (realm,
id), optionally ``as_name``, and the catalog's REST endpoint and catalog name (else the
``restore`` resource's, as the command's flags beat its settings); the OAuth2 client
comes from the resource only (its secret an ``EnvVar``), so the secret is never part of
a run's config or shown by the UI. A refusal fails the run with its one line.
Every deployment has it: ``build_defs``' job list (``build_jobs_and_schedules``) names it.
"""

# No ``from __future__ import annotations``: Dagster reads the op's config and
# resource annotations as classes, not strings.

from typing import Optional

from dagster import Config, Failure, OpExecutionContext, in_process_executor, job, op

from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.resources.restore import PolarisRestoreResource
from polaris_pipeline.dagster.resources.storage import PolarisStorageResource
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.restore.restore import restore as restore_table

RESTORE_OP = "polaris_restore_table"
RESTORE_JOB = "polaris_restore_table_job"


class RestoreTableConfig(Config):
    """What ``tasks restore ID [--as NAMESPACE.NAME]`` takes, with its flags."""

    realm: str
    task_id: int
    as_name: Optional[str] = None  # noqa: UP045 (Dagster's config reads Optional)
    rest_uri: Optional[str] = None  # noqa: UP045
    catalog: Optional[str] = None  # noqa: UP045


@op(name=RESTORE_OP, description="Restores one dropped table, as `tasks restore` does.")
def polaris_restore_table(
    context: OpExecutionContext,
    config: RestoreTableConfig,
    metastore: PolarisMetastoreResource,
    storage: PolarisStorageResource,
    restore: PolarisRestoreResource,
) -> None:
    store = metastore.get_metastore()
    try:
        task = store.get_task(config.realm, config.task_id)
        if task is None:
            raise PolarisPipelineError(f"no task {config.task_id} in realm {config.realm!r}")
        target = restore.target(config.rest_uri, config.catalog)
        result = restore_table(
            store,
            storage.get_resolver(),
            target,
            task,
            config.as_name,
            storage.deletion_record,
        )
    except PolarisPipelineError as e:
        raise Failure(str(e)) from None
    for line in result.lines:
        context.log.info(line)
    context.add_output_metadata({"changed": result.changed, "result": "\n".join(result.lines)})


@job(
    name=RESTORE_JOB,
    executor_def=in_process_executor,
    description=f"Restores a dropped table: launch it with ops.{RESTORE_OP}.config.",
)
def polaris_restore_table_job() -> None:
    polaris_restore_table()
