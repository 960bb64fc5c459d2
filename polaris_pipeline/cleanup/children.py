"""Child tasks a handler schedules: the parent's realm, properties and override."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.tasks.model import PERMANENT_TRUE, NewTask, Prop, TaskType
from polaris_pipeline.tasks.payloads import task_properties


def new_child(
    ctx: CleanupContext,
    task_type: TaskType,
    name: str,
    data: str,
    internal_properties: Mapping[str, str] | None = None,
) -> NewTask:
    """A child task of ``ctx.task``: same realm, the parent's internal properties by default.

    A parent whose shared-location guard an operator overrode hands the override down:
    its children delete the files the operator let it delete.
    """
    task_id = ctx.new_task_id() if ctx.new_task_id is not None else (secrets.randbits(63) or 1)
    internal = ctx.task.internal_properties if internal_properties is None else internal_properties
    properties = task_properties(task_type, data)
    if ctx.task.shared_location_allowed:
        properties[Prop.ALLOW_SHARED_LOCATION] = PERMANENT_TRUE
    return NewTask(
        realm_id=ctx.task.realm_id,
        id=task_id,
        name=name,
        properties=properties,
        internal_properties=dict(internal),
    )
