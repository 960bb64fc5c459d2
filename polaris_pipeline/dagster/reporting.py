"""What a task run did, told the way an operator asks: by table, for the whole run.

Pure functions (no Dagster context needed), and the one sensor that uses them:

- ``table_of(task)``: the table a task cleans up (``namespace.table`` from the
  dropped entity, or a child's ``tableId``), its catalog and location, decoded
  by ``tasks.summary.summarize`` (the CLI's own decoder);
- ``run_tags_for_table``: the ``polaris/table`` (and catalog, location) tags the
  task job adds as its run starts;
- ``run_total``: files deleted, already gone, refused, bytes freed and children by
  status over every step of a run, read back from the steps' metadata into the
  engine's ``OutcomeTotals``, whose ``line`` is the run's total;
- ``table_event``: the ``AssetMaterialization`` of one purged table, keyed
  ``["polaris", realm, "catalog_<id>", *namespace, table]``, with the run's
  numbers and a link to the run, so the catalog answers "when was this table
  purged and how much was freed" over time;
- ``polaris_run_report``: a sensor that, for each finished run of the task job,
  writes the total into the run's ``polaris/total`` tag and records the event.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dagster import (
    AssetKey,
    AssetMaterialization,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    MetadataValue,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)
from dagster._core.storage.dagster_run import DagsterRun

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.tasks import payloads
from polaris_pipeline.tasks.model import TaskRow, TaskType
from polaris_pipeline.tasks.summary import summarize

TAG_REALM = "polaris/realm"  # the task job's own tag (task_job.TAG_REALM)
TAG_TABLE = "polaris/table"
TAG_CATALOG = "polaris/catalog_id"
TAG_LOCATION = "polaris/table_location"
TAG_TOTAL = "polaris/total"
REPORT_SENSOR_NAME = "polaris_run_report"
UNKNOWN_CATALOG = "catalog_unknown"
# Run metadata values shown as text are cut to this; tags longer than this are refused.
_TAG_MAX = 255
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


@dataclass(frozen=True)
class TableRef:
    """A dropped table, as a run and the catalog name it."""

    realm: str
    namespace: tuple[str, ...]
    name: str
    catalog_id: int | None = None
    # The table's base location when the payload holds it (its metadata file's folder).
    location: str | None = None

    @property
    def label(self) -> str:
        """``namespace.table``: Iceberg's own way of writing an identifier."""
        return str(payloads.TableIdentifier(self.namespace, self.name))

    @property
    def asset_key(self) -> AssetKey:
        """``["polaris", realm, "catalog_<id>", *namespace, table]``, each part made safe.

        Dagster's UI links asset keys by their parts; characters outside
        ``[A-Za-z0-9_-]`` become ``_`` (the exact name stays in the event's metadata).
        """
        catalog = f"catalog_{self.catalog_id}" if self.catalog_id is not None else UNKNOWN_CATALOG
        parts = [self.realm, catalog, *self.namespace, self.name]
        return AssetKey(["polaris", *(_UNSAFE.sub("_", p) or "_" for p in parts)])


def _table_location(metadata_location: str | None) -> str | None:
    # .../table/metadata/00003-<uuid>.metadata.json -> .../table
    if not metadata_location:
        return None
    head = metadata_location.rsplit("/", 1)[0]
    return head[: -len("/metadata")] if head.endswith("/metadata") else head


def table_of(task: TaskRow) -> TableRef | None:
    """The table ``task`` cleans up; None when its payload does not name one (or a view's)."""
    summary = summarize(task)
    if summary.problem is not None or summary.table is None or summary.is_view:
        return None
    catalog_id: int | None = None
    namespace: tuple[str, ...]
    name: str
    try:
        kind = task.task_type()
        data = task.data()
        if kind is TaskType.ENTITY_CLEANUP_SCHEDULER:
            from polaris_pipeline.cleanup.common import table_identifier

            entity = payloads.decode_dropped_entity(data)
            identifier = table_identifier(entity)
            catalog_id = entity.catalog_id or None
        elif kind is TaskType.MANIFEST_FILE_CLEANUP:
            identifier = payloads.decode_manifest_cleanup(data).table_id
        else:
            identifier = payloads.decode_batch_cleanup(data).table_id
    except PolarisPipelineError:
        return None
    namespace, name = identifier.namespace, identifier.name
    return TableRef(
        realm=task.realm_id,
        namespace=namespace,
        name=name,
        catalog_id=catalog_id,
        location=_table_location(summary.metadata_location),
    )


def _tag_value(text: str) -> str:
    return text if len(text) <= _TAG_MAX else text[: _TAG_MAX - 1] + "…"


def run_tags_for_table(ref: TableRef | None) -> dict[str, str]:
    """The tags a run of ``ref``'s task carries (none when the task names no table)."""
    if ref is None:
        return {}
    # The realm too: a run launched by hand has no polaris/realm tag of its own.
    tags = {TAG_REALM: ref.realm, TAG_TABLE: _tag_value(ref.label)}
    if ref.catalog_id is not None:
        tags[TAG_CATALOG] = str(ref.catalog_id)
    if ref.location:
        tags[TAG_LOCATION] = _tag_value(ref.location)
    return tags


def location_metadata(ref: TableRef | None) -> dict[str, MetadataValue]:
    """The table and its location as run metadata: a URL value for URLs, a path otherwise."""
    if ref is None:
        return {}
    meta: dict[str, MetadataValue] = {"table": MetadataValue.text(ref.label)}
    if ref.location:
        is_url = "://" in ref.location and not ref.location.startswith("file:")
        meta["table location"] = (
            MetadataValue.url(ref.location) if is_url else MetadataValue.path(ref.location)
        )
    return meta


# ------------------------------------------------------------------ the run total


# A run's total is the engine's: the same numbers, keys and line as a CLI sweep's.
def run_total(instance: DagsterInstance, run_id: str) -> OutcomeTotals:
    """The total of one run, from its step outputs and step failures in the event log."""
    total = OutcomeTotals()
    for event_type in (DagsterEventType.STEP_OUTPUT, DagsterEventType.STEP_FAILURE):
        records = instance.get_records_for_run(run_id, of_type=event_type, limit=10_000).records
        for record in records:
            event = record.event_log_entry.dagster_event
            if event is None:
                continue
            if event_type is DagsterEventType.STEP_OUTPUT:
                entries = event.step_output_data.metadata
            else:
                user = event.step_failure_data.user_failure_data
                entries = user.metadata if user is not None else {}
            values = {k: v.value for k, v in entries.items()}
            total.add_step(values, failed=event_type is DagsterEventType.STEP_FAILURE)
    return total


def table_event(
    ref: TableRef, total: OutcomeTotals, run_id: str, status: str = "success"
) -> AssetMaterialization:
    """The catalog's record of one table's purge by one run."""
    meta: dict[str, Any] = {
        **total.metadata(),
        **location_metadata(ref),
        "realm": MetadataValue.text(ref.realm),
        "run": MetadataValue.dagster_run(run_id),
        "run status": MetadataValue.text(status),
    }
    if ref.catalog_id is not None:
        meta["catalog id"] = MetadataValue.int(ref.catalog_id)
    return AssetMaterialization(
        asset_key=ref.asset_key,
        description=f"table {ref.label} of realm {ref.realm} purged: {total.line()}",
        metadata=meta,
    )


def ref_from_tags(tags: Mapping[str, str]) -> TableRef | None:
    """The table of a run, from the tags ``run_tags_for_table`` gave it."""
    label = tags.get(TAG_TABLE)
    realm = tags.get(TAG_REALM)
    if not label or not realm:
        return None
    # The label joins the levels with dots; a level holding a dot cannot be told apart,
    # which only moves the key's split, never the table it names.
    *namespace, name = label.split(".")
    raw_catalog = tags.get(TAG_CATALOG, "")
    return TableRef(
        realm=realm,
        namespace=tuple(namespace),
        name=name,
        catalog_id=int(raw_catalog) if raw_catalog.isdigit() else None,
        location=tags.get(TAG_LOCATION) or None,
    )


# ------------------------------------------------------------------ the sensor

_FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE]


def report_run(instance: DagsterInstance, run: DagsterRun) -> OutcomeTotals:
    """Tag ``run`` with its total and record its table's event; returns the total."""
    total = run_total(instance, run.run_id)
    instance.add_run_tags(run.run_id, {TAG_TOTAL: _tag_value(total.line())})
    ref = ref_from_tags(run.tags)
    if ref is not None and (total.files_deleted or total.files_missing or total.tasks):
        status = "success" if run.status == DagsterRunStatus.SUCCESS else "failure"
        instance.report_runless_asset_event(table_event(ref, total, run.run_id, status))
    return total


def build_run_report_sensor(
    job_name: str,
    *,
    name: str = REPORT_SENSOR_NAME,
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
) -> SensorDefinition:
    """Reports every finished run of ``job_name`` once (the cursor: last update time)."""

    @sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description=(
            f"For each finished run of {job_name}: writes the run's total (files deleted, "
            "already gone, refused, bytes freed, children by status) into its polaris/total "
            "tag, and records the purged table as an asset event in the catalog "
            "(polaris/<realm>/catalog_<id>/<namespace>/<table>). Never launches a run."
        ),
    )
    def _report(context: SensorEvaluationContext) -> SkipReason:
        after = float(context.cursor) if context.cursor else None
        records = context.instance.get_run_records(
            RunsFilter(job_name=job_name, statuses=_FINISHED, updated_after=_dt(after)),
            limit=100,
            ascending=True,
        )
        reported = 0
        for record in records:
            if TAG_TOTAL not in record.dagster_run.tags:
                report_run(context.instance, record.dagster_run)
                reported += 1
            stamp = record.update_timestamp.timestamp()
            after = stamp if after is None else max(after, stamp)
        if after is not None:
            context.update_cursor(str(after))
        return SkipReason(f"reported {reported} finished run(s) of {job_name}")

    return _report


def _dt(stamp: float | None) -> datetime | None:
    return datetime.fromtimestamp(stamp, UTC) if stamp is not None else None


__all__ = [
    "REPORT_SENSOR_NAME",
    "TAG_CATALOG",
    "TAG_LOCATION",
    "TAG_TABLE",
    "TAG_TOTAL",
    "TableRef",
    "build_run_report_sensor",
    "location_metadata",
    "ref_from_tags",
    "report_run",
    "run_tags_for_table",
    "run_total",
    "table_event",
    "table_of",
]
