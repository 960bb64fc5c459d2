"""What a task run did, told the way an operator asks: by table, for the whole run.

- ``run_total``: every step's one structured entry (``report/step_record.py``) added up
  into ``OutcomeTotals``;
- ``report_run``: that total into the ``polaris/total`` tag, and the purged table's
  ``AssetMaterialization`` (the translator's ``table_materialization``), so the catalog
  answers when a table was purged and how much was freed;
- ``polaris_run_report``: the sensor reporting each finished task run once.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from polaris_pipeline.dagster.contract import TAG_TOTAL
from polaris_pipeline.dagster.tables import TABLE_REF_KEY, TableRef
from polaris_pipeline.dagster.translator import DEFAULT_TRANSLATOR, PolarisTranslator, tag_value
from polaris_pipeline.report.step_record import read_step
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.unreferenced.report import UnreferencedReport

REPORT_SENSOR_NAME = "polaris_run_report"


# ------------------------------------------------------------------ the run total


# A run's total is the engine's: the same numbers, keys and line as a CLI sweep's.
def run_total(instance: DagsterInstance, run_id: str) -> OutcomeTotals:
    """The total of one run, from its step outputs and step failures in the event log."""
    return _read_run(instance, run_id)[0]


def _read_run(
    instance: DagsterInstance, run_id: str
) -> tuple[OutcomeTotals, UnreferencedReport | None, TableRef | None]:
    """The run's total, its table's unreferenced phase (None: none ran), and its table
    as its steps recorded it (None: no step named one)."""
    total = OutcomeTotals()
    unreferenced: UnreferencedReport | None = None
    table: TableRef | None = None
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
            step = read_step(values, failed=event_type is DagsterEventType.STEP_FAILURE)
            total += step.totals
            unreferenced = step.unreferenced or unreferenced
            table = table or TableRef.from_json(values.get(TABLE_REF_KEY))
    return total, unreferenced, table


# ------------------------------------------------------------------ the sensor

# A run's last update is stamped by the process that finished it, on its host's
# clock, before it commits: a run stamped earlier than one the sensor has read can
# still appear (a slower commit, a host whose clock is behind). The cursor never
# passes this far behind now, so such a run is read at a later tick; a run read
# again is already tagged and skipped.
SETTLE_S = 60.0

# The finished runs reported (a canceled run never is).
REPORTED_STATUSES = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE]


def report_run(
    instance: DagsterInstance, run: DagsterRun, translator: PolarisTranslator | None = None
) -> OutcomeTotals:
    """Tag ``run`` with its total and record its table's event; returns the total."""
    translator = translator or DEFAULT_TRANSLATOR
    total, unreferenced, ref = _read_run(instance, run.run_id)
    instance.add_run_tags(run.run_id, {TAG_TOTAL: tag_value(total.line())})
    if ref is not None and (total.files_deleted or total.files_missing or total.tasks):
        status = "success" if run.status == DagsterRunStatus.SUCCESS else "failure"
        event = translator.table_materialization(
            ref, total, run.run_id, status, unreferenced=unreferenced
        )
        instance.report_runless_asset_event(event)
    return total


def build_run_report_sensor(
    job_name: str,
    *,
    name: str = REPORT_SENSOR_NAME,
    minimum_interval_seconds: int = 15,
    default_status: DefaultSensorStatus = DefaultSensorStatus.RUNNING,
    translator: PolarisTranslator | None = None,
) -> SensorDefinition:
    """Reports every finished run of ``job_name`` once (the cursor: last update time,
    held ``SETTLE_S`` behind the sensor's clock).

    ``translator`` decides the table's asset key and event (the task job's own).
    """

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
        since = datetime.fromtimestamp(after, UTC) if after is not None else None
        records = context.instance.get_run_records(
            RunsFilter(job_name=job_name, statuses=REPORTED_STATUSES, updated_after=since),
            limit=100,
            ascending=True,
        )
        reported = 0
        for record in records:
            if TAG_TOTAL not in record.dagster_run.tags:
                report_run(context.instance, record.dagster_run, translator)
                reported += 1
            stamp = record.update_timestamp.timestamp()
            after = stamp if after is None else max(after, stamp)
        if after is not None:
            context.update_cursor(str(min(after, time.time() - SETTLE_S)))
        return SkipReason(f"reported {reported} finished run(s) of {job_name}")

    return _report
