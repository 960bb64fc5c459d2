"""The order a cleanup's children run in: named stages, declared here as data.

Each stage runs after every child of the one before is done; children within a stage may
run in parallel. The CLI sweep and the Dagster job (one slot per stage) both read
``CHILD_STAGES``. The table's plan: manifests with their content files, then lists and
older metadata, then the current metadata file last, so a retried parent can plan again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from polaris_pipeline.errors import PayloadError
from polaris_pipeline.tasks.model import NewTask, TaskRow, TaskType
from polaris_pipeline.tasks.payloads import decode_batch_cleanup
from polaris_pipeline.tasks.ref import Lease

T = TypeVar("T")

# A stage's name names its steps in the Dagster job: letters, digits, underscores.
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Iceberg's metadata files: ``<version>-<uuid>.metadata.json``, or ``.gz.metadata.json``.
_METADATA_FILE = ".metadata.json"


@dataclass(frozen=True)
class ChildStage:
    """One stage of children: its name (an identifier) and what it deletes, in one line."""

    name: str
    description: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"child stage name {self.name!r} is not a lower-case identifier")


MANIFESTS = ChildStage(
    "manifest",
    "Manifest children: each deletes one manifest's content files, then the manifest.",
)
METADATA = ChildStage(
    "metadata",
    "Batch children: manifest lists, older metadata files and statistics files.",
)
CURRENT_METADATA = ChildStage(
    "current_metadata",
    "The batch child that deletes the table's current metadata file, last.",
)

# The engine's plan, in the order the stages run.
CHILD_STAGES: tuple[ChildStage, ...] = (MANIFESTS, METADATA, CURRENT_METADATA)

# Children of one stage each, in the plan's order.
Staged = list[tuple[ChildStage, list[T]]]


def check_plan(plan: Sequence[ChildStage]) -> tuple[ChildStage, ...]:
    """``plan`` as a tuple; refused when empty or when two stages share a name."""
    stages = tuple(plan)
    names = [stage.name for stage in stages]
    if not stages or len(set(names)) != len(names):
        raise ValueError(f"a child stage plan needs distinct stages, got {names}")
    return stages


def in_plan_order(
    assigned: Iterable[tuple[ChildStage, Iterable[T]]],
    plan: Sequence[ChildStage] = CHILD_STAGES,
) -> Staged[T]:
    """Every stage of ``plan``, in its order, with what ``assigned`` puts into it (maybe nothing).

    Raises ValueError for a stage that is not in the plan: nothing would run it.
    """
    by_stage: dict[ChildStage, list[T]] = {stage: [] for stage in check_plan(plan)}
    for stage, items in assigned:
        if stage not in by_stage:
            raise ValueError(f"child stage {stage.name!r} is not in the plan")
        by_stage[stage].extend(items)
    return list(by_stage.items())


def leases_in_stages(
    staged: Sequence[tuple[ChildStage, Sequence[NewTask]]],
    leases: Sequence[Lease],
    plan: Sequence[ChildStage] = CHILD_STAGES,
) -> Staged[Lease]:
    """The leases of the children ``staged`` names, in their stages, each in creation order.

    A lease whose child no stage names (a handler that gave no stages) goes to the
    plan's first stage: with no order asked for, the children are one stage.
    """
    stage_of = {(task.realm_id, task.id): stage for stage, tasks in staged for task in tasks}
    first = check_plan(plan)[0]
    return in_plan_order(
        ((stage_of.get((lease.realm_id, lease.task_id), first), [lease]) for lease in leases), plan
    )


def orphan_stage(task: TaskRow) -> ChildStage:
    """The stage of an orphaned child of a table cleanup (its parent row gone), from its row.

    Manifest children run with the manifests. A batch child of one metadata file alone runs
    last: how a table hands down its current metadata file (an older one alone in the last
    batch runs last as safely). Anything else, or an undecodable payload, runs with batches.
    """
    if task.task_type_code == TaskType.MANIFEST_FILE_CLEANUP.code:
        return MANIFESTS
    if task.task_type_code == TaskType.BATCH_FILE_CLEANUP.code:
        try:
            files = decode_batch_cleanup(task.data()).batch_files
        except PayloadError:
            return METADATA
        if len(files) == 1 and files[0].endswith(_METADATA_FILE):
            return CURRENT_METADATA
    return METADATA
