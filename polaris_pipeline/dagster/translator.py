"""``PolarisTranslator``: what the Dagster UI shows of a Polaris task, decided in one class.

As dagster-dbt's ``DagsterDbtTranslator`` does for dbt nodes, one object maps
a task (its row), a lease on it and an outcome to everything Dagster stores
and shows: the run tags, the steps' metadata, the table's asset key and its
``AssetMaterialization``. The sweeper, the task job, the run report and the
alerts all ask it; ``build_defs(translator=...)`` and the ``PolarisSweeper``
component (``translator: my_pkg.module.MyTranslator``) take a subclass::

    class MyTranslator(PolarisTranslator):
        asset_key_prefix = ("lake", "purged")

        def start_tags(self, lease, task):
            return {**super().start_tags(lease, task), "team": "data-platform"}

Tag *names* are the contract's (``dagster/contract.py``): the sweeper, the run
report and run-queue rules read them back, so a subclass adds tags of its own
and changes values it alone reads, never the contract's names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import Any

from dagster import AssetKey, AssetMaterialization, Failure, MetadataValue

from polaris_pipeline.dagster import contract
from polaris_pipeline.dagster.step_result import TaskResult
from polaris_pipeline.dagster.tables import (
    ASSET_KEY_PREFIX,
    TABLE_REF_KEY,
    TableRef,
    key_parts,
    table_of,
)
from polaris_pipeline.execution.outcome import Status, TaskOutcome
from polaris_pipeline.report.fields import (
    CHILDREN_DONE,
    FAILED_CHILDREN,
    PERMANENT,
    RESTORED_AS,
    SHARED_LOCATION_OVERRIDDEN,
    STATUS,
    UNREFERENCED,
    restored_text,
)
from polaris_pipeline.report.outcome_facts import OutcomeFacts
from polaris_pipeline.report.outcome_metadata import (
    not_run_metadata,
    outcome_metadata,
    per_task_metadata,
    unreferenced_metadata,
)
from polaris_pipeline.report.step_record import STEP_RECORD_KEY, StepRecord
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.storage.uri import split_uri
from polaris_pipeline.tasks.decoded import DecodedTask, task_type_name
from polaris_pipeline.tasks.formatting import PATH_SAMPLE, iso_utc_seconds, quoted_task_label
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.orphans import CandidateRun
from polaris_pipeline.tasks.ref import Lease, TaskRef
from polaris_pipeline.unreferenced.report import UnreferencedReport


def tag_value(text: str) -> str:
    """``text`` cut to the longest tag value Dagster takes."""
    limit = contract.TAG_MAX
    return text if len(text) <= limit else text[: limit - 1] + "…"


class PolarisTranslator:
    """Decides every run tag value, metadata entry, asset key and event of a Polaris task.

    Subclass it and override a method (or ``asset_key_prefix``) to change what
    the UI shows; every method has the library's default.
    """

    # The first parts of every table's asset key.
    asset_key_prefix: Sequence[str] = ASSET_KEY_PREFIX

    # ------------------------------------------------------------ tables

    def table_of(self, task: TaskRow | DecodedTask) -> TableRef | None:
        """The table ``task`` cleans up (every part of its payload that decodes); a row is
        decoded here, a ``DecodedTask`` is read as it is."""
        return table_of(task)

    def table_asset_key(self, ref: TableRef) -> AssetKey:
        """``[*asset_key_prefix, realm, "catalog_<id>", *namespace, table]``, parts made safe."""
        return AssetKey([*self.asset_key_prefix, *key_parts(ref)])

    def table_tags(self, ref: TableRef | None) -> dict[str, str]:
        """The tags a run of ``ref``'s task carries (none when the task names no table)."""
        if ref is None:
            return {}
        # The realm too: a run launched by hand has no polaris/realm tag of its own.
        tags = {contract.TAG_REALM: ref.realm, contract.TAG_TABLE: tag_value(ref.label)}
        if ref.catalog_id is not None:
            tags[contract.TAG_CATALOG] = str(ref.catalog_id)
        if ref.location:
            tags[contract.TAG_LOCATION] = tag_value(ref.location)
        return tags

    def table_metadata(self, ref: TableRef | None) -> dict[str, MetadataValue]:
        """The table and its location: a URL value for URLs, a path otherwise; and the
        table whole (``TABLE_REF_KEY``), which the run report reads back."""
        if ref is None:
            return {}
        meta: dict[str, MetadataValue] = {
            "table": MetadataValue.text(ref.label),
            TABLE_REF_KEY: MetadataValue.json(ref.to_json()),
        }
        if ref.location:
            is_url = split_uri(ref.location)[0] != "file"
            meta["table location"] = (
                MetadataValue.url(ref.location) if is_url else MetadataValue.path(ref.location)
            )
        return meta

    def table_materialization(
        self,
        ref: TableRef,
        total: OutcomeTotals,
        run_id: str,
        status: str = "success",
        *,
        unreferenced: UnreferencedReport | None = None,
    ) -> AssetMaterialization:
        """The catalog's record of one table's purge by one run. ``unreferenced``: what
        its unreferenced phase did (None: none ran)."""
        meta: dict[str, Any] = {
            **total.metadata(),
            **self.table_metadata(ref),
            "realm": MetadataValue.text(ref.realm),
            "run": MetadataValue.dagster_run(run_id),
            "run status": MetadataValue.text(status),
        }
        if ref.catalog_id is not None:
            meta["catalog id"] = MetadataValue.int(ref.catalog_id)
        description = f"table {ref.label} of realm {ref.realm} purged: {total.line()}"
        if unreferenced is not None:
            line = unreferenced.summary()
            meta[UNREFERENCED] = MetadataValue.text(line)
            description += f"; {line}"
        return AssetMaterialization(
            asset_key=self.table_asset_key(ref), description=description, metadata=meta
        )

    # ------------------------------------------------------------ run tags

    def task_tags(self, task: TaskRow) -> dict[str, str]:
        """Tags of the run the sweeper requests for ``task`` (attempt and executor come at
        start)."""
        return {
            contract.TAG_REALM: task.realm_id,
            contract.TAG_TASK_ID: str(task.id),
            contract.TAG_TASK_TYPE: task_type_name(task.task_type_code),
            contract.TAG_LAUNCHED_BY: contract.LAUNCHED_BY_SWEEPER,
        }

    def request_tags(self, run: CandidateRun) -> dict[str, str]:
        """Tags of the run the sweeper requests: one task's, or a group of orphans'."""
        tags = self.task_tags(run.first)
        if run.parent_name is not None:
            tags[contract.TAG_TASK_TYPE] = contract.ORPHANED_CHILDREN
            tags[contract.TAG_ORPHANS_OF] = tag_value(run.parent_name)
            tags[contract.TAG_TASK_COUNT] = str(len(run.tasks))
            # A group's run starts no task of its own, so no start adds the table's tags:
            # its children's payloads name their one table (orphans group by it).
            tags.update(self.table_tags(self.table_of(run.first)))
        return tags

    def lease_tags(self, lease: Lease) -> dict[str, str]:
        """Tags that let an operator find a task's runs in the UI."""
        return {
            contract.TAG_REALM: lease.realm_id,
            contract.TAG_TASK_ID: str(lease.task_id),
            contract.TAG_TASK_TYPE: task_type_name(lease.task_type_code),
            contract.TAG_ATTEMPT: str(lease.attempt),
            contract.TAG_EXECUTOR: lease.executor_id,
        }

    def start_tags(self, lease: Lease, task: TaskRow | DecodedTask | None) -> dict[str, str]:
        """Tags a run adds once it started its task: the lease, and every part of the
        task's payload that decodes (its table)."""
        table = self.table_of(task) if task is not None else None
        return {**self.lease_tags(lease), **self.table_tags(table)}

    def group_tags(self, executor_id: str, attempts: Iterable[int] = ()) -> dict[str, str]:
        """Tags of a run of orphaned children: its executor id and the highest attempt
        of its children so far (each child's is in its step's metadata)."""
        tags = {contract.TAG_EXECUTOR: executor_id}
        highest = max(attempts, default=None)
        if highest is not None:
            tags[contract.TAG_ATTEMPT] = str(highest)
        return tags

    def outcome_tags(self, outcome: str) -> dict[str, str]:
        """``polaris/outcome``: done, skipped, lease-lost."""
        return {contract.TAG_OUTCOME: outcome}

    # ------------------------------------------------------------ metadata

    def task_label(self, ref: TaskRef | Lease) -> str:
        """``realm/id 'name'``, the name cut (a batch child's name holds its file list)."""
        return quoted_task_label(ref.realm_id, ref.task_id, ref.name)

    def lease_metadata(self, lease: Lease) -> dict[str, Any]:
        """Which task a step ran and under which lease."""
        return {
            "task": self.task_label(lease),
            "realm": lease.realm_id,
            "task id": str(lease.task_id),
            "type": task_type_name(lease.task_type_code),
            "lease executor": lease.executor_id,
            "lease attempt": lease.attempt,
            "lease started": iso_utc_seconds(lease.start_time_ms) or "",
        }

    def step_record_metadata(self, record: StepRecord) -> dict[str, MetadataValue]:
        """A step's one structured entry (``STEP_RECORD_KEY``): what the run report reads
        (``reporting.run_total``); every number beside it is display only."""
        return {STEP_RECORD_KEY: MetadataValue.json(record.to_json())}

    def _outcome_record(self, outcome: TaskOutcome) -> dict[str, MetadataValue]:
        record = StepRecord(OutcomeTotals.of([outcome]), OutcomeFacts(outcome).unreferenced)
        return self.step_record_metadata(record)

    def done_metadata(
        self, outcome: TaskOutcome, task: TaskRow | DecodedTask | None
    ) -> dict[str, Any]:
        """A step's metadata for a task done (or restored: the live entity it came back
        as): the table, the lease, the numbers."""
        result = outcome.result
        decoded = DecodedTask.of(task) if task is not None else None
        meta = {
            **self.table_metadata(self.table_of(decoded) if decoded is not None else None),
            **self.lease_metadata(outcome.lease),
            STATUS: outcome.status.value,
            "type": task_type_name(outcome.task_type),
            **self._outcome_record(outcome),
        }
        if outcome.restored_as:
            meta[RESTORED_AS] = MetadataValue.text(restored_text(outcome.restored_as))
            return meta
        if result is None:
            meta["note"] = "task row already gone: finished by another executor"
            return meta
        meta.update(outcome_metadata(outcome))
        if result.deleted_paths_sample:
            meta["deleted paths (sample)"] = MetadataValue.json(list(result.deleted_paths_sample))
        if result.notes:
            meta["notes"] = MetadataValue.md("\n".join(f"- {n}" for n in result.notes))
        if result.shared_location_override:
            meta[SHARED_LOCATION_OVERRIDDEN] = MetadataValue.text(result.shared_location_override)
        return meta

    def failure_metadata(
        self,
        outcome: TaskOutcome,
        run_id: str,
        error: str,
        *,
        next_attempt: str | None = None,
        table: TableRef | None = None,
    ) -> dict[str, Any]:
        """A failed task's step metadata: the table, the lease, the error (``error``: its
        first line, when the outcome holds none), samples of what failed."""
        meta = {
            **self.table_metadata(table),
            **self.lease_metadata(outcome.lease),
            STATUS: outcome.status.value,
            "error": outcome.error or error,
            PERMANENT: outcome.permanent,
            "dagster run id": MetadataValue.dagster_run(run_id),  # a link in the UI
            **self._outcome_record(outcome),
        }
        if next_attempt is not None:
            meta["next attempt"] = next_attempt
        result = outcome.result
        if result is not None:
            meta.update(outcome_metadata(outcome))
            if result.refused:
                meta["refused paths (sample)"] = MetadataValue.json(
                    [{"path": r.path, "reason": r.reason} for r in result.refused[:PATH_SAMPLE]]
                )
            if result.failed:
                failed = list(result.failed.items())[:PATH_SAMPLE]
                meta["failed deletes (sample)"] = MetadataValue.json(
                    [{"path": u, "error": e} for u, e in failed]
                )
        return meta

    def lease_lost_metadata(
        self, lease: Lease, message: str, outcome: TaskOutcome | None = None
    ) -> dict[str, Any]:
        """A step whose task was taken away mid-way: counted as lease lost, no numbers
        (the current holder finishes it and claims its work); with ``outcome``, what is
        left under the table's location when its row vanished meanwhile."""
        totals = OutcomeTotals.counted("lease-lost")
        left = OutcomeFacts(outcome).unreferenced if outcome is not None else None
        return {
            **self.lease_metadata(lease),
            STATUS: "lease-lost",
            "message": message,
            **(unreferenced_metadata(outcome) if outcome is not None else {}),
            **self.step_record_metadata(StepRecord(totals, left)),
        }

    def skipped_metadata(self, message: str) -> dict[str, Any]:
        """A sweeper's run that found its task taken or not due: skipped, nothing done."""
        return {
            STATUS: "skipped",
            "message": message,
            **self.step_record_metadata(StepRecord(OutcomeTotals.counted("skipped"))),
        }

    def _group_totals(self, done: Sequence[TaskResult]) -> OutcomeTotals:
        ran = OutcomeTotals.of([r.outcome for r in done if r.outcome is not None], child=True)
        # Found already done: a status, no outcome.
        found = [OutcomeTotals.counted(r.found, child=True) for r in done if r.outcome is None]
        return sum(found, ran)

    def group_metadata(
        self,
        refs: Sequence[TaskRef],
        executor_id: str,
        done: Sequence[TaskResult],
    ) -> dict[str, Any]:
        """What a group step did, in total and per task (each child's attempt too), and
        the table its children clean up (the run report's, read back)."""
        totals = self._group_totals(done)
        outcomes = [r.outcome for r in done if r.outcome is not None]
        results = [o.result for o in outcomes if o.result is not None]
        tables = (self.table_of(o.task) for o in outcomes if o.task is not None)
        sample = [p for r in results for p in r.deleted_paths_sample][:PATH_SAMPLE]
        meta: dict[str, Any] = {
            **self.table_metadata(next((t for t in tables if t is not None), None)),
            "realm": ", ".join(sorted({ref.realm_id for ref in refs})),
            "lease executor": executor_id,
            **totals.metadata(),
            "tasks": MetadataValue.json([_per_task(r) for r in done]),
        }
        if sample:
            meta["deleted paths (sample)"] = MetadataValue.json(sample)
        meta.update(self.step_record_metadata(StepRecord(totals)))
        return meta

    def group_failure_metadata(
        self,
        done: Sequence[TaskResult],
        failures: Sequence[Failure],
    ) -> dict[str, Any]:
        """A group step some of whose child tasks failed (recorded): the first failure's
        metadata, and the whole group's numbers, the failed children's included."""
        totals = self._group_totals(done)
        for failure in failures:
            values = {k: getattr(v, "value", v) for k, v in (failure.metadata or {}).items()}
            record = StepRecord.from_json(values.get(STEP_RECORD_KEY))
            totals += (
                record.totals.as_children()
                if record is not None
                # Failed before running (an operator's child that could not start).
                else OutcomeTotals.counted(Status.FAILED.value, child=True)
            )
        first = {k: v for k, v in (failures[0].metadata or {}).items() if k != STEP_RECORD_KEY}
        return {
            **first,
            FAILED_CHILDREN: len(failures),
            CHILDREN_DONE: len(done),
            **totals.metadata(),
            **self.step_record_metadata(StepRecord(totals)),
        }


# The library's own choices, for callers given no translator.
DEFAULT_TRANSLATOR = PolarisTranslator()


def translator_from_path(path: str) -> PolarisTranslator:
    """An instance of the ``PolarisTranslator`` subclass named ``package.module.Class``
    (or ``package.module:Class``), made without arguments: the component's way."""
    module_name, sep, class_name = path.strip().replace(":", ".").rpartition(".")
    if not sep or not module_name or not class_name:
        raise ValueError(f"translator {path!r}: expected package.module.ClassName")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"translator {path!r} not found: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, PolarisTranslator)):
        raise ValueError(f"translator {path!r} is not a PolarisTranslator subclass")
    return found()


def _per_task(ran: TaskResult) -> dict[str, Any]:
    """A group step's entry for one task, from what ran (never from its output value)."""
    if ran.outcome is not None:
        return per_task_metadata(ran.outcome)
    return not_run_metadata(ran.found, ran.task)
