"""This deployment's assets: the task backlog of every realm with its checks (reported by
the sweeper and its watch) and the leak report with its check."""

from collections.abc import Sequence

from dagster import AssetChecksDefinition, AssetsDefinition

from polaris_pipeline.dagster.backlog import BACKLOG_CHECKS, STORAGE_CHECKS, polaris_task_backlog
from polaris_pipeline.dagster.leaks import polaris_leaked_roots

assets: list[AssetsDefinition] = [polaris_task_backlog, polaris_leaked_roots]

asset_checks: Sequence[AssetChecksDefinition] = [*BACKLOG_CHECKS, *STORAGE_CHECKS]
