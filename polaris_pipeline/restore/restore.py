"""``tasks restore``: bring back a held (or not yet purged) table from its last metadata.

In order, each refusal changing nothing:

1. the task is a table's or view's drop (the parent cleanup task);
2. every file its last metadata names exists (``restorable``);
3. nothing live overlaps its location but the table itself registered from this file
   (shared files would make two purges delete each other's data);
4. the catalog's REST API registers the file under its name (or ``--as``); without an
   endpoint the request and calls are printed, nothing else happens;
5. the parent and every child are ended by compare-and-set (refused, naming the holder,
   while a run holds a lease);
6. a restore record is written beside the deletion records, when kept.

A rerun after a failed ending finds the table registered from this file and finishes.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations
from polaris_pipeline.restore.held import check_task
from polaris_pipeline.restore.register import (
    RestTarget,
    register,
    register_forms,
    registered_metadata,
)
from polaris_pipeline.storage.deletion_record import write_restore_record as restore_record
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import parse_location, same_location
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow, TaskType
from polaris_pipeline.tasks.payloads import TableIdentifier


class RestoreRefused(PolarisPipelineError):
    """A restore that changed nothing, and why (one line)."""


@dataclass(frozen=True)
class RestorePlan:
    """What a restore registers: the table's last metadata file under ``name``."""

    task: TaskRow
    name: TableIdentifier
    metadata_file: str
    is_view: bool


@dataclass(frozen=True)
class RestoreResult:
    """What happened: ``lines`` to print; ``changed`` whether anything was."""

    lines: list[str]
    changed: bool


def parse_name(text: str) -> TableIdentifier:
    """``NAMESPACE.NAME`` (levels by dots) as an identifier; ValueError when malformed."""
    parts = text.split(".")
    if len(parts) < 2 or not all(p.strip() for p in parts):
        raise RestoreRefused(f"--as {text!r}: give NAMESPACE.NAME, e.g. sales.orders_restored")
    return TableIdentifier(tuple(parts[:-1]), parts[-1])


def plan_restore(
    store: Metastore, resolver: StorageResolver, task: TaskRow, new_name: str | None
) -> RestorePlan:
    """Steps 1-3: what to register; RestoreRefused naming the first reason not to."""
    decoded = DecodedTask.of(task)
    entity = decoded.entity
    if decoded.kind is not TaskType.ENTITY_CLEANUP_SCHEDULER or entity is None:
        raise RestoreRefused(
            f"task {task.label} is not a table's or view's drop ({decoded.type_name}): "
            "only a drop's own task can be restored"
        )
    if entity.metadata_location is None or decoded.identifier is None:
        raise RestoreRefused(f"task {task.label}: the dropped entity names no metadata file")
    checked = check_task(store, resolver, task)
    if checked.result is None or not checked.result.restorable:
        raise RestoreRefused(
            f"task {task.label} ({checked.table}) is not restorable: {checked.summary()}"
        )
    location = entity.properties.get("location")
    if location:
        live = LiveLocations(store.engine, store.check_schema(), bound_s=store.guard_bound_s)
        # The table itself, registered again from this very file (by a first run whose
        # ending failed, or by any client), is no other owner: the rerun finishes.
        back = live.restored_as(task.realm_id, entity.metadata_location)
        hits = [
            hit
            for hit in live.overlaps(parse_location(location, directory=True))
            if back is None or (hit.realm_id, hit.entity_id) != (back.realm_id, back.entity_id)
        ]
        if hits:
            raise RestoreRefused(
                f"task {task.label}: its location {location} has a live owner, "
                f"{hits[0].describe()}; drop or move that one first"
            )
    name = parse_name(new_name) if new_name else decoded.identifier
    return RestorePlan(task, name, entity.metadata_location, entity.is_view)


def restore(
    store: Metastore,
    resolver: StorageResolver,
    target: RestTarget,
    task: TaskRow,
    new_name: str | None,
    record_prefix: str | None = None,
) -> RestoreResult:
    """The whole restore (see the module); RestoreRefused when it changed nothing."""
    plan = plan_restore(store, resolver, task, new_name)
    shown = str(plan.name)
    if plan.is_view:
        raise RestoreRefused(
            f"task {task.label} drops a view: registering a view is not in the Iceberg REST "
            f"API this uses; its metadata file is {plan.metadata_file}"
        )
    if target.uri is None:
        lines = [
            f"task {task.label}: {shown} is restorable; no REST endpoint configured, so "
            "nothing was changed. Register it with one of:",
            *register_forms(target, plan.name, plan.metadata_file),
            f"then end its purge: polaris-pipeline tasks restore {task.id} with the endpoint "
            "set (or requeue nothing: the hold keeps it until it ends)",
        ]
        return RestoreResult(lines, changed=False)
    already = registered_metadata(target, plan.name)
    if already is not None and not same_location(already, plan.metadata_file):
        raise RestoreRefused(
            f"task {task.label}: {shown} already exists in catalog {target.catalog!r} "
            f"(at {already}); restore under another name with --as"
        )
    lines = []
    if already is None:
        register(target, plan.name, plan.metadata_file)
        lines.append(f"registered {shown} in catalog {target.catalog!r} from {plan.metadata_file}")
    else:
        lines.append(f"{shown} was already registered from {plan.metadata_file}")
    try:
        ended = store.end_restored(task)
    except PolarisPipelineError as e:
        lines.append(f"the table is registered, but its purge was not ended: {e}")
        raise RestoreRefused("; ".join(lines)) from None
    lines.append(f"ended task {task.label} and {len(ended) - 1} child task(s)")
    if record_prefix:
        uri = write_restore_record(resolver, record_prefix, plan, target, len(ended))
        lines.append(f"restore record: {resolver.redact(uri)}")
    return RestoreResult(lines, changed=True)


def write_restore_record(
    resolver: StorageResolver, prefix: str, plan: RestorePlan, target: RestTarget, ended: int
) -> str:
    """The restore record (``storage/deletion_record.py``): who, when, what, as what."""
    return restore_record(
        resolver,
        prefix,
        plan.task,
        {
            "by": getpass.getuser(),
            "metadata_file": plan.metadata_file,
            "registered_as": str(plan.name),
            "catalog": target.catalog,
            "tasks_ended": ended,
        },
    )
