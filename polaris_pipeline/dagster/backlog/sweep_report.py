"""The backlog report a sweep makes: the asset's numbers and its three metastore checks,
as the sweeper tick's asset events (the daemon stores a sensor's asset events as they are).

At most every ``report_interval_seconds`` of the ``backlog`` resource (``reported_ms``
in the sweeper's cursor). It costs one ``count_by_state``, shared with the sweeper's
skip reason, and one read of the rows of orphaned, backing-off and dead tasks when
there are some (``report.read_report``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dagster import SensorEvaluationContext

from polaris_pipeline.dagster.backlog.checks import backlog_events
from polaris_pipeline.dagster.backlog.report import read_report
from polaris_pipeline.dagster.backlog.settings import BacklogSettings
from polaris_pipeline.dagster.resources.metastore import PolarisMetastoreResource
from polaris_pipeline.dagster.sweeper_state import SweepCursor
from polaris_pipeline.tasks.model import TaskState


class BacklogReporter:
    """The backlog report of one sweep, made once when ``report_interval_seconds`` passed since
    the cursor's last; one that fails to read is logged and left for the next: never stops a sweep.
    """

    def __init__(
        self,
        context: SensorEvaluationContext,
        metastore: PolarisMetastoreResource,
        settings: BacklogSettings,
        cursor: SweepCursor,
        now_ms: int,
    ) -> None:
        self._context = context
        self._metastore = metastore
        self._settings = settings
        self._now_ms = now_ms
        self._reported_ms = cursor.reported_ms
        last = cursor.reported_ms
        self._due = last is None or now_ms - last >= settings.report_interval_seconds * 1000
        self._events: list[Any] | None = None
        self.counts: dict[str, Counter[TaskState]] | None = None

    def events(self) -> list[Any]:
        if self._events is not None:
            return self._events
        self._events = []
        if not self._due:
            return self._events
        store = self._metastore.get_metastore()
        try:
            self.counts = store.count_by_state(self._metastore.realms)
            backlog = read_report(store, self._metastore.realms, self.counts)
        except Exception as exc:
            self._context.log.warning(
                f"backlog not reported ({type(exc).__name__}); trying again at the next sweep"
            )
            return self._events
        self._events = backlog_events(
            backlog, self._settings, description="reported by the sweeper sensor with a sweep"
        )
        self._reported_ms = self._now_ms
        return self._events

    def cursor(self, next_ms: int, *, backlog: bool = False) -> str:
        return SweepCursor(next_ms, backlog=backlog, reported_ms=self._reported_ms).dump()
