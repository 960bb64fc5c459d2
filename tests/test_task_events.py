"""Polaris's task attempt events and OpenTelemetry spans, against real PostgreSQL and SQLite.

The expected rows are the shape Polaris's PolarisPersistenceEventListener and
ModelEvent write for BEFORE_ATTEMPT_TASK / AFTER_ATTEMPT_TASK, written out by hand.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text

from builders.restricted_role import admin_connection
from builders.tasks import batch_task
from polaris_pipeline.dagster.definitions import build_defs_from_env
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.execution.telemetry import AttemptSpan, AttemptTracer
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.events import event_catalog
from polaris_pipeline.settings import PipelineSettings
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy
from polaris_pipeline.tasks.release import TaskEvents, parse_task_events
from tests.support.metastore import pipeline_store, with_policy

EVENT_COLUMNS = (
    "realm_id, catalog_id, event_id, request_id, event_type, timestamp_ms, principal_name, "
    "resource_type, resource_identifier, additional_properties"
)


def open_store(url: str, version: int) -> Metastore:
    policy = TaskPolicy(lease_timeout_ms=60_000, grace_ms=0)
    return pipeline_store(url, policy, schema_version=version)


@pytest.fixture
def v5(metastore_url: str) -> Iterator[Metastore]:
    store = open_store(metastore_url, 5)
    yield store
    store.dispose()


def _q(store: Metastore) -> str:
    return "polaris_schema." if store.dialect == "postgresql" else ""


def read_events(store: Metastore) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(f"SELECT {EVENT_COLUMNS} FROM {_q(store)}events ORDER BY timestamp_ms, event_type")
        ).mappings()
        out = []
        for row in rows:
            event = dict(row)
            props = event["additional_properties"]
            event["additional_properties"] = json.loads(props) if isinstance(props, str) else props
            out.append(event)
    # BEFORE sorts after AFTER by name; put each attempt's BEFORE first when the clock ties.
    out.sort(key=lambda e: (e["timestamp_ms"], e["event_type"] != "BEFORE_ATTEMPT_TASK"))
    return out


def good_task(tmp_path: Path, realm: str = "r1", **kwargs: Any) -> tuple[NewTask, list[Path]]:
    table = tmp_path / "wh" / "ns" / "t"
    (table / "metadata").mkdir(parents=True, exist_ok=True)
    files = [table / "metadata" / f"{uuid.uuid4().hex}.avro" for _ in range(2)]
    for f in files:
        f.write_bytes(b"x" * 10)
    task = batch_task(
        realm, [str(f) for f in files], internal={"storageLocation": f"file://{table}"}, **kwargs
    )
    return task, files


def refused_task(tmp_path: Path, realm: str = "r1") -> NewTask:
    """A batch naming a file outside the task's storageLocation: the guard refuses it."""
    table = tmp_path / "wh" / "ns" / "t"
    outside = tmp_path / "wh" / "ns" / "t-neighbour" / "data.parquet"
    outside.parent.mkdir(parents=True, exist_ok=True)
    outside.write_text("precious")
    return batch_task(realm, [str(outside)], internal={"storageLocation": f"file://{table}"})


def sweep(
    store: Metastore, write_task_events: TaskEvents | None = None, **runner_kwargs: Any
) -> tuple[Runner, list[Any]]:
    if write_task_events is not None:
        store = with_policy(store, task_events=write_task_events)
    with Runner(store, **runner_kwargs) as runner:
        outcomes = sweep_tasks(runner)
    return runner, outcomes


@pytest.mark.parametrize("version", [3, 4, 5])
def test_swept_task_writes_polaris_shaped_before_and_after_events(
    metastore_url: str, tmp_path: Path, version: int
) -> None:
    store = open_store(metastore_url, version)
    task, files = good_task(tmp_path)
    store.insert_tasks([task])
    runner, outcomes = sweep(store, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    before, after = read_events(store)
    catalog = None if version >= 5 else "__realm__"
    for event, kind in ((before, "BEFORE_ATTEMPT_TASK"), (after, "AFTER_ATTEMPT_TASK")):
        assert event["realm_id"] == "r1"
        assert event["catalog_id"] == catalog
        assert str(uuid.UUID(event["event_id"])) == event["event_id"]
        assert event["request_id"] is None and event["principal_name"] is None
        assert event["event_type"] == kind and event["resource_identifier"] == kind
        assert event["resource_type"] == "REALM"
        assert event["timestamp_ms"] > 1_600_000_000_000
    assert before["event_id"] != after["event_id"]
    assert before["timestamp_ms"] <= after["timestamp_ms"]
    common = {
        "task_entity_id": str(task.id),
        "task_attempt": "1",
        "task_executor_id": runner.executor_id,
    }
    # No tracer provider configured: no otel.* keys, as Polaris without a valid span.
    assert before["additional_properties"] == common
    assert after["additional_properties"] == {**common, "task_success": "true"}
    store.dispose()


def test_failing_attempt_says_task_success_false_with_its_attempt_number(
    v5: Metastore, tmp_path: Path
) -> None:
    task = refused_task(tmp_path)
    # Three earlier leases: this one is attempt 4.
    task.properties[Prop.ATTEMPT_COUNT] = "3"
    v5.insert_tasks([task])
    _, outcomes = sweep(v5, write_task_events=True)
    assert [o.status for o in outcomes] in ([Status.FAILED], [Status.DEAD])
    assert (tmp_path / "wh" / "ns" / "t-neighbour" / "data.parquet").read_text() == "precious"
    before, after = read_events(v5)
    assert before["additional_properties"]["task_attempt"] == "4"
    assert "task_success" not in before["additional_properties"]
    assert after["additional_properties"]["task_attempt"] == "4"
    assert after["additional_properties"]["task_success"] == "false"


def test_one_pair_of_events_per_attempt_for_children_too(v5: Metastore, tmp_path: Path) -> None:
    ok, _ = good_task(tmp_path)
    bad = refused_task(tmp_path)
    v5.insert_tasks([ok, bad])
    sweep(v5, write_task_events=True)
    events = read_events(v5)
    assert len(events) == 4
    by_task: dict[str, list[dict[str, str]]] = {}
    for e in events:
        props = e["additional_properties"]
        by_task.setdefault(props["task_entity_id"], []).append(props)
    assert sorted(by_task) == sorted([str(ok.id), str(bad.id)])
    assert by_task[str(ok.id)][1]["task_success"] == "true"
    assert by_task[str(bad.id)][1]["task_success"] == "false"


def test_disabled_by_default_writes_nothing(v5: Metastore, tmp_path: Path) -> None:
    task, _ = good_task(tmp_path)
    v5.insert_tasks([task])
    _, outcomes = sweep(v5)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert read_events(v5) == []


@pytest.mark.parametrize("version", [1, 2])
def test_schema_without_events_table_enabled_is_fine(
    metastore_url: str, tmp_path: Path, version: int, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(metastore_url, version)
    task, files = good_task(tmp_path)
    store.insert_tasks([task])
    with caplog.at_level("WARNING", logger="polaris_pipeline.events"):
        runner, outcomes = sweep(store, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    # Nothing said of the events (other loggers, e.g. the guards' missing indexes, may).
    said = [r for r in caplog.records if r.name.startswith("polaris_pipeline.events")]
    assert runner.observer.events.failures == 0 and said == []
    with store.engine.connect() as conn:
        tables = {
            r[0]
            for r in conn.execute(
                text(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = 'polaris_schema'"
                    if store.dialect == "postgresql"
                    else "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            )
        }
    assert "events" not in tables
    store.dispose()


# ----------------------------------------------------- by the Polaris release


def untyped(task: NewTask) -> NewTask:
    """``task`` as Polaris before 1.7 writes a BATCH row: no ``type``."""
    data = json.loads(task.properties[Prop.DATA])
    del data["type"]
    task.properties[Prop.DATA] = json.dumps(data)
    return task


def release_store(url: str, version: int, release: str | None) -> Metastore:
    policy = TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, polaris_version=release)
    return pipeline_store(url, policy, schema_version=version)


@pytest.mark.parametrize(
    ("version", "release", "catalogs"),
    [
        # 1.6 writes the sentinel on any schema, v5 included.
        (4, "1.6", ["__realm__", "__realm__"]),
        (5, "1.6.0", ["__realm__", "__realm__"]),
        # 1.7+: the sentinel below v5 (an upgraded deployment), NULL on v5.
        (4, "1.7", ["__realm__", "__realm__"]),
        (5, "1.7", [None, None]),
        # Before 1.6 Polaris persists no task events: none is written, though enabled.
        (4, "1.5", []),
        (3, "1.2", []),
    ],
)
def test_events_take_the_shape_of_the_configured_release(
    metastore_url: str, tmp_path: Path, version: int, release: str, catalogs: list[str | None]
) -> None:
    store = release_store(metastore_url, version, release)
    task, files = good_task(tmp_path)
    store.insert_tasks([task])
    _, outcomes = sweep(store, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    events = read_events(store)
    assert [e["catalog_id"] for e in events] == catalogs
    # Our own reader takes the sentinel as Polaris does: no catalog.
    assert all(event_catalog(e["catalog_id"]) is None for e in events)
    store.dispose()


@pytest.mark.parametrize(("setting", "written"), [(True, 0), ("always", 2)])
def test_always_writes_events_for_a_release_that_has_none(
    metastore_url: str, tmp_path: Path, setting: TaskEvents, written: int
) -> None:
    """Polaris 1.4 persists no task events: none unless the setting says ``always``, when
    the rows take the shape of the events table that is there (the sentinel below v5)."""
    store = release_store(metastore_url, 4, "1.4")
    task, _ = good_task(tmp_path)
    store.insert_tasks([task])
    _, outcomes = sweep(store, write_task_events=setting)
    assert [o.status for o in outcomes] == [Status.DONE]
    events = read_events(store)
    assert len(events) == written
    assert [e["catalog_id"] for e in events] == ["__realm__"] * written
    store.dispose()


@pytest.mark.parametrize(
    ("raw", "value"),
    [("true", True), ("YES", True), ("0", False), ("off", False), (" Always ", "always")],
)
def test_the_task_events_setting_reads_true_false_and_always(raw: str, value: object) -> None:
    assert parse_task_events(raw) == value
    assert (
        PipelineSettings.from_env({"POLARIS_PIPELINE_TASK_EVENTS": raw}).metastore.events() == value
    )


@pytest.mark.parametrize("raw", ["sometimes", "2", ""])
def test_a_task_events_value_that_is_not_one_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="true, false or always"):
        parse_task_events(raw)


@pytest.mark.parametrize(("task_typed", "written"), [(True, True), (False, False)])
def test_unset_the_release_is_inferred_for_events_too(
    metastore_url: str, tmp_path: Path, task_typed: bool, written: bool
) -> None:
    """v4, release unset: a Polaris BATCH row with type is 1.7+ (events, the sentinel);
    only rows without it leave the floor, 1.4, which has no task events."""
    store = release_store(metastore_url, 4, None)
    task, _ = good_task(tmp_path)
    store.insert_tasks([task if task_typed else untyped(task)])
    runner, outcomes = sweep(store, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    resolved = runner.contexts.releases.resolve("r1")
    assert str(resolved.release) == ("1.7" if task_typed else "1.4")
    assert [e["catalog_id"] for e in read_events(store)] == (
        ["__realm__", "__realm__"] if written else []
    )
    store.dispose()


def test_every_event_row_has_a_fresh_id(v5: Metastore, tmp_path: Path) -> None:
    """1.7's own rows of one task share an id (and lose the second): ours never do."""
    tasks = [good_task(tmp_path / str(i))[0] for i in range(3)]
    v5.insert_tasks(tasks)
    sweep(v5, write_task_events=True)
    ids = [e["event_id"] for e in read_events(v5)]
    assert len(ids) == 6 and len(set(ids)) == 6


def test_the_sentinel_reads_as_no_catalog() -> None:
    assert event_catalog("__realm__") is None and event_catalog(None) is None
    assert event_catalog("cat") == "cat"


def test_an_event_that_cannot_be_written_never_fails_the_attempt(
    v5: Metastore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The admin breaks the table (the pipeline's role may not alter it).
    with admin_connection(v5) as conn:
        conn.execute(
            text(f"ALTER TABLE {_q(v5)}events RENAME COLUMN resource_identifier TO renamed")
        )
    task, files = good_task(tmp_path)
    v5.insert_tasks([task])
    with caplog.at_level("WARNING", logger="polaris_pipeline.events"):
        runner, outcomes = sweep(v5, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    assert v5.get_task("r1", task.id) is None  # the result was written
    assert runner.observer.events.failures == 2
    assert sum("event for" in r.getMessage() for r in caplog.records) == 2


# ------------------------------------------------------------- OpenTelemetry


def sdk_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_one_span_per_attempt_with_its_attributes(v5: Metastore, tmp_path: Path) -> None:
    ok, _ = good_task(tmp_path)
    bad = refused_task(tmp_path)
    v5.insert_tasks([ok, bad])
    provider, exporter = sdk_provider()
    runner, outcomes = sweep(v5, tracer_provider=provider, write_task_events=True)
    spans = exporter.get_finished_spans()
    assert len(spans) == len(outcomes) == 2
    by_id = {s.attributes["polaris.task.entity.id"]: s for s in spans if s.attributes}
    good, refused = by_id[ok.id], by_id[bad.id]
    for span in spans:
        assert span.name == "polaris.task"
        assert span.attributes is not None
        assert span.attributes["polaris.realm.id"] == "r1"
        assert span.attributes["polaris.task.attempt"] == 1
        assert span.attributes["polaris.task.type"] == "BATCH_FILE_CLEANUP"
        assert span.attributes["polaris.task.executor.id"] == runner.executor_id
    assert good.attributes is not None and refused.attributes is not None
    assert good.attributes["polaris.task.outcome"] == "done"
    assert good.attributes["polaris.task.files_deleted"] == 2
    assert good.attributes["polaris.task.bytes_freed"] == 20
    assert good.status.is_ok
    assert refused.attributes["polaris.task.outcome"] in ("failed", "dead")
    assert refused.attributes["polaris.task.files_deleted"] == 0
    assert not refused.status.is_ok and "t-neighbour" in (refused.status.description or "")
    # The events carry the span's context, as Polaris's do.
    events = [
        e for e in read_events(v5) if e["additional_properties"]["task_entity_id"] == str(ok.id)
    ]
    ctx = good.get_span_context()
    assert ctx is not None
    for event in events:
        props = event["additional_properties"]
        assert props["otel.span_id"] == format(ctx.span_id, "016x")
        assert props["otel.trace_id"] == format(ctx.trace_id, "032x")
        assert props["otel.sampled"] == "true"
        # Two hex digits of the flags, as Java's TraceFlags.asHex (the SDK may set
        # W3C's random-id bit besides "sampled").
        assert props["otel.trace_flags"] == format(int(ctx.trace_flags), "02x")
        assert int(props["otel.trace_flags"], 16) & 1 == 1


def test_an_attempt_that_raises_ends_its_span_and_writes_after(
    v5: Metastore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task, _ = good_task(tmp_path)
    v5.insert_tasks([task])
    provider, exporter = sdk_provider()

    def broken_complete(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    store = with_policy(v5, task_events=True)
    monkeypatch.setattr(store, "complete", broken_complete)
    with (
        Runner(store, tracer_provider=provider) as runner,
        pytest.raises(KeyboardInterrupt),
    ):
        sweep_tasks(runner)
    (span,) = exporter.get_finished_spans()
    assert not span.status.is_ok
    assert [e["event_type"] for e in read_events(v5)] == [
        "BEFORE_ATTEMPT_TASK",
        "AFTER_ATTEMPT_TASK",
    ]
    assert read_events(v5)[1]["additional_properties"]["task_success"] == "false"


def test_without_an_sdk_spans_are_no_ops(v5: Metastore, tmp_path: Path) -> None:
    task, files = good_task(tmp_path)
    v5.insert_tasks([task])
    # The API is installed but no provider configured: the global proxy records nothing.
    _, outcomes = sweep(v5, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    assert not any(
        k.startswith("otel.") for e in read_events(v5) for k in e["additional_properties"]
    )


def test_without_the_opentelemetry_package_nothing_breaks(
    v5: Metastore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import opentelemetry` raise ImportError.
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError):
        from opentelemetry import trace  # noqa: F401
    with AttemptTracer().span({"polaris.task.entity.id": 1}) as span:
        assert isinstance(span, AttemptSpan) and span.context() == {}
        span.set({"polaris.task.outcome": "done"})
        span.error("nothing to mark")
    task, files = good_task(tmp_path)
    v5.insert_tasks([task])
    _, outcomes = sweep(v5, write_task_events=True)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    assert [e["additional_properties"]["task_success"] for e in read_events(v5)[1:]] == ["true"]


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("always", "always"), ("no", False)])
def test_the_deployment_hands_always_to_its_runs(raw: str, value: object) -> None:
    """``always`` travels as the metastore resource's ``task_events`` word, and its runs'
    Runner gets the setting back whole."""
    defs = build_defs_from_env({"POLARIS_PIPELINE_TASK_EVENTS": raw})
    resource = (defs.resources or {})["metastore"]
    assert resource.events() == value
    assert resource.policy().task_events == value


@pytest.mark.parametrize(("setting", "written"), [(True, True), (False, False)])
def test_a_runner_built_without_the_switch_takes_it_from_the_policy(
    v5: Metastore, tmp_path: Path, setting: bool, written: bool
) -> None:
    """No caller can leave the setting out: a Runner given only the metastore writes the
    events its policy asks for (the CLI, the task job and the realm backfill build it so)."""
    policy = dataclasses.replace(v5.policy, task_events=setting, grace_ms=0)
    store = Metastore(engine=v5.engine, policy=policy)
    task, files = good_task(tmp_path)
    store.insert_tasks([task])
    _, outcomes = sweep(store)
    assert [o.status for o in outcomes] == [Status.DONE]
    assert not any(f.exists() for f in files)
    assert bool(read_events(store)[1:]) is written
