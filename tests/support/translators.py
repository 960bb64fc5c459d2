"""A user's ``PolarisTranslator`` subclass, as a project would write one (tests only)."""

from __future__ import annotations

from polaris_pipeline.dagster.translator import PolarisTranslator
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import Lease

TEAM_TAG = "team"
TEAM = "data-platform"


class LakeTranslator(PolarisTranslator):
    """Tables under ``lake/purged/...`` in the catalog, and a team tag on every started run."""

    asset_key_prefix = ("lake", "purged")

    # Written as a user of an earlier release wrote it: the task as a row (a DecodedTask
    # reads the row's fields through).
    def start_tags(self, lease: Lease, task: TaskRow | None) -> dict[str, str]:  # type: ignore[override]
        return {**super().start_tags(lease, task), TEAM_TAG: TEAM}


__all__ = ["TEAM", "TEAM_TAG", "LakeTranslator"]
