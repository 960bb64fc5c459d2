"""One OpenTelemetry span per task attempt, when OpenTelemetry is installed; a no-op otherwise.

Only ``opentelemetry-api`` is used (the ``otel`` extra), imported on first use:
without it, or without an SDK configured by the application, spans cost nothing
and record nothing. The span and its first attributes are named as Polaris's
``TaskExecutorImpl.handleTaskWithTracing`` names its own attempt spans, so one
dashboard shows both; the rest are ours.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any

log = logging.getLogger("polaris_pipeline.telemetry")

SPAN_NAME = "polaris.task"
ATTR_REALM = "polaris.realm.id"  # Polaris's TracingFilter.REALM_ID_ATTRIBUTE
ATTR_TASK_ID = "polaris.task.entity.id"
ATTR_ATTEMPT = "polaris.task.attempt"
ATTR_TYPE = "polaris.task.type"
ATTR_EXECUTOR = "polaris.task.executor.id"
ATTR_OUTCOME = "polaris.task.outcome"
ATTR_FILES_DELETED = "polaris.task.files_deleted"
ATTR_BYTES_FREED = "polaris.task.bytes_freed"

# Keys of the trace context Polaris records in an event's additional_properties
# (PolarisEventMetadata.OPEN_TELEMETRY_*_KEY).
OTEL_SPAN_ID_KEY = "otel.span_id"
OTEL_TRACE_ID_KEY = "otel.trace_id"
OTEL_SAMPLED_KEY = "otel.sampled"
OTEL_TRACE_FLAGS_KEY = "otel.trace_flags"

AttributeValue = str | bool | int | float


def _trace_api() -> Any | None:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


class AttemptSpan:
    """The span of one attempt; every method is a no-op when there is no span."""

    def __init__(self, span: Any | None = None) -> None:
        self._span = span

    def set(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        if self._span is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self._span.set_attribute(key, value)

    def error(self, description: str) -> None:
        """Mark the attempt failed (an outcome, not an exception)."""
        trace = _trace_api()
        if self._span is None or trace is None:
            return
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, description))

    def context(self) -> dict[str, str]:
        """The trace context as Polaris writes it into events; empty without a recording span.

        Same shape as Polaris's PolarisEventMetadataFactory.getOpenTelemetryContext:
        lower-case hex ids, ``true``/``false``, and the flags as two hex digits.
        """
        if self._span is None:
            return {}
        ctx = self._span.get_span_context()
        if not ctx.is_valid:
            return {}
        return {
            OTEL_SPAN_ID_KEY: format(ctx.span_id, "016x"),
            OTEL_TRACE_ID_KEY: format(ctx.trace_id, "032x"),
            OTEL_SAMPLED_KEY: "true" if ctx.trace_flags.sampled else "false",
            OTEL_TRACE_FLAGS_KEY: format(int(ctx.trace_flags), "02x"),
        }


class AttemptTracer:
    """Starts attempt spans from ``tracer_provider``, else the globally configured one."""

    def __init__(self, tracer_provider: Any | None = None) -> None:
        self._provider = tracer_provider

    @cached_property
    def _tracer(self) -> Any | None:
        trace = _trace_api()
        if trace is None:
            return None
        return trace.get_tracer("polaris_pipeline", tracer_provider=self._provider)

    @contextmanager
    def span(self, attributes: Mapping[str, AttributeValue | None]) -> Iterator[AttemptSpan]:
        """A span around the block; an exception leaving it is recorded on the span."""
        tracer = self._tracer
        if tracer is None:
            yield AttemptSpan()
            return
        with tracer.start_as_current_span(SPAN_NAME) as span:
            attempt = AttemptSpan(span)
            attempt.set(attributes)
            yield attempt
