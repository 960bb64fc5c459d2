"""What an attempt leaves for observers: a span around it and Polaris's two events inside it.

The events are written inside the span so that they carry its trace context,
as Polaris's own events do (Polaris takes the context when it dispatches).
Neither may change the attempt: both swallow their own failures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polaris_pipeline.execution.outcome import TaskOutcome
from polaris_pipeline.execution.telemetry import (
    ATTR_ATTEMPT,
    ATTR_BYTES_FREED,
    ATTR_EXECUTOR,
    ATTR_FILES_DELETED,
    ATTR_OUTCOME,
    ATTR_REALM,
    ATTR_TASK_ID,
    ATTR_TYPE,
    AttemptTracer,
)
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.events import TaskEventWriter
from polaris_pipeline.metastore.release_probe import ReleaseProbe
from polaris_pipeline.tasks.decoded import polaris_type_name
from polaris_pipeline.tasks.ref import Lease
from polaris_pipeline.tasks.release import TaskEvents


def attempt_succeeded(outcome: TaskOutcome) -> bool:
    """``task_success``: the handler ran to the end without a failure and the result was kept.

    Polaris sets it when the handler returned normally. A task found already
    gone while its failure was written has no successful result, hence the check
    on ``result`` and not just the status.
    """
    return outcome.ok and outcome.result is not None and outcome.result.ok


class AttemptObserver:
    def __init__(
        self,
        metastore: Metastore,
        *,
        write_task_events: TaskEvents = False,
        tracer_provider: Any | None = None,
        releases: ReleaseProbe | None = None,
    ) -> None:
        self.events = TaskEventWriter(metastore, enabled=write_task_events, releases=releases)
        self.tracer = AttemptTracer(tracer_provider)

    def observe(
        self,
        lease: Lease,
        task_type_code: str | None,
        executor_id: str,
        attempt: Callable[[], TaskOutcome],
    ) -> TaskOutcome:
        """Run ``attempt`` inside its span, between its BEFORE and AFTER events."""
        with self.tracer.span(
            {
                ATTR_REALM: lease.realm_id,
                ATTR_TASK_ID: lease.task_id,
                ATTR_ATTEMPT: lease.attempt,
                ATTR_TYPE: polaris_type_name(task_type_code),
                ATTR_EXECUTOR: executor_id,
            }
        ) as span:
            self.events.before(lease, executor_id, span.context())
            success = False
            try:
                outcome = attempt()
                success = attempt_succeeded(outcome)
                result = outcome.result
                span.set(
                    {
                        ATTR_OUTCOME: str(outcome.status),
                        ATTR_FILES_DELETED: result.deleted if result is not None else 0,
                        ATTR_BYTES_FREED: result.bytes_freed if result is not None else None,
                    }
                )
                if not success:
                    span.error(outcome.error or str(outcome.status))
                return outcome
            except BaseException as exc:
                # OpenTelemetry marks only Exception subclasses; an interrupt ends the attempt too.
                span.error(f"attempt interrupted: {type(exc).__name__}")
                raise
            finally:
                # Also when the attempt raised: Polaris writes AFTER in a finally block.
                self.events.after(lease, executor_id, success, span.context())
