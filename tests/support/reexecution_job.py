"""The code location's task job, reconstructable: for in-process re-executions.

``dagster.execute_job`` re-executes a run from failure only for a job it can
rebuild by import, as a run worker does; this module gives it the one the code
location builds from the environment (``build_defs_from_env``), and the same
job as a release before the contract was tagged made its runs: no
``polaris/contract`` tag.
"""

from dagster import JobDefinition

from polaris_pipeline.dagster import build_defs_from_env
from polaris_pipeline.dagster.contract import JOB_NAME, TAG_CONTRACT


def task_job() -> JobDefinition:
    """The task job with its resources, as ``definitions.py`` configures them."""
    return build_defs_from_env().resolve_job_def(JOB_NAME)


def untagged_task_job() -> JobDefinition:
    """The same graph and resources, without the contract's tag (contract version 1)."""
    defs = build_defs_from_env()
    today = defs.resolve_job_def(JOB_NAME)
    return today.graph.to_job(
        name=JOB_NAME,
        tags={k: v for k, v in today.tags.items() if k != TAG_CONTRACT},
        resource_defs=dict(defs.resources or {}),
        executor_def=today.executor_def,
    )
