"""Leasing and attempt results against real PostgreSQL and SQLite (each test runs on both)."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import text, update

from builders.tasks import batch_task
from polaris_pipeline.errors import LeaseLost, MetastoreError, SchemaMismatchError
from polaris_pipeline.metastore import CompleteOutcome, FailOutcome, Metastore
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.tasks.model import Prop, TaskPolicy, TaskState
from tests.support.metastore import pipeline_store, restart_lease
from tests.support.tasks import insert_raw_task, seed


def _set_props(store: Metastore, realm: str, task_id: int, **changes: str | None) -> None:
    """Rewrite some properties of a row directly, as another writer would."""
    task = store.get_task(realm, task_id)
    assert task is not None
    props = dict(task.properties)
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    with store.engine.begin() as conn:
        conn.execute(
            update(entities)
            .where(entities.c.realm_id == realm, entities.c.id == task_id)
            .values(properties=props, entity_version=task.entity_version + 1)
        )


def _age_lease(store: Metastore, realm: str, task_id: int, by_ms: int) -> None:
    task = store.get_task(realm, task_id)
    assert task is not None and task.start_time_ms is not None
    _set_props(store, realm, task_id, **{Prop.START_TIME: str(task.start_time_ms - by_ms)})


# ---------------------------------------------------------------- schema


def test_init_is_idempotent_and_check_passes(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    with pytest.raises(MetastoreError, match="no Polaris entities table"):
        store.check_schema()
    assert store.init_schema() is True
    assert store.init_schema() is False
    store.check_schema()
    store.dispose()


def test_refuses_foreign_entities_table(metastore_url: str) -> None:
    store = Metastore(metastore_url)
    with store.engine.begin() as conn:
        if store.dialect == "postgresql":
            conn.execute(text("CREATE SCHEMA polaris_schema"))
            conn.execute(
                text("CREATE TABLE polaris_schema.entities (id TEXT PRIMARY KEY, body TEXT)")
            )
        else:
            conn.execute(text("CREATE TABLE entities (id TEXT PRIMARY KEY, body TEXT)"))
    with pytest.raises(SchemaMismatchError, match="missing column realm_id"):
        store.init_schema()
    with pytest.raises(SchemaMismatchError):
        store.check_schema()
    store.dispose()


V1_DDL = """
CREATE TABLE {schema}entities (
    realm_id TEXT NOT NULL, catalog_id BIGINT NOT NULL, id BIGINT NOT NULL,
    parent_id BIGINT NOT NULL, name TEXT NOT NULL, entity_version INT NOT NULL,
    type_code INT NOT NULL, sub_type_code INT NOT NULL, create_timestamp BIGINT NOT NULL,
    drop_timestamp BIGINT NOT NULL, purge_timestamp BIGINT NOT NULL,
    to_purge_timestamp BIGINT NOT NULL, last_update_timestamp BIGINT NOT NULL,
    properties {json} NOT NULL, internal_properties {json} NOT NULL,
    grant_records_version INT NOT NULL,
    PRIMARY KEY (realm_id, id),
    CONSTRAINT constraint_name UNIQUE (realm_id, catalog_id, parent_id, type_code, name)
)
"""


def test_schema_v1_without_location_column_works_end_to_end(metastore_url: str) -> None:
    store = Metastore(metastore_url, policy=TaskPolicy(grace_ms=0))
    pg = store.dialect == "postgresql"
    with store.engine.begin() as conn:
        if pg:
            conn.execute(text("CREATE SCHEMA polaris_schema"))
        conn.execute(
            text(
                V1_DDL.format(
                    schema="polaris_schema." if pg else "", json="JSONB" if pg else "TEXT"
                )
            )
        )
        conn.execute(
            text(
                f"CREATE TABLE {'polaris_schema.' if pg else ''}version "
                "(version_key TEXT PRIMARY KEY, version_value INTEGER)"
            )
        )
        conn.execute(
            text(f"INSERT INTO {'polaris_schema.' if pg else ''}version VALUES ('version', 1)")
        )
    assert store.check_schema() == 1
    assert store.init_schema() is False  # recognised as Polaris's, left alone
    seed(store, "r1", 3)
    leases = store.lease_available("ex", 10)
    assert len(leases) == 3
    assert all(store.complete(lease) is CompleteOutcome.DONE for lease in leases)
    assert store.count_tasks() == 0
    store.dispose()


# --------------------------------------------------------------- leasing


def test_lease_writes_what_polaris_writes(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    before = metastore.get_task("r1", task.id)
    assert before is not None
    (lease,) = metastore.lease_available("exec-1", 10)
    after = metastore.get_task("r1", task.id)
    assert after is not None
    assert after.properties[Prop.EXECUTOR] == "exec-1"
    assert after.properties[Prop.ATTEMPT_COUNT] == "1"
    assert after.start_time_ms == lease.start_time_ms
    assert after.entity_version == before.entity_version + 1 == lease.entity_version
    assert after.last_update_timestamp == lease.start_time_ms
    # Polaris's own keys are untouched, and every value is still a string.
    assert after.properties[Prop.DATA] == task.properties[Prop.DATA]
    assert all(isinstance(v, str) for v in after.properties.values())
    assert after.state(metastore.now_ms(), metastore.policy) is TaskState.LEASED
    assert metastore.lease_available("exec-2", 10) == []


def test_lease_limit_and_realm_filter(metastore: Metastore) -> None:
    seed(metastore, "r1", 5)
    seed(metastore, "r2", 4)
    assert metastore.realms() == ["r1", "r2"]
    first = metastore.lease_available("e", 3, realms=["r2"])
    assert len(first) == 3 and {lease.realm_id for lease in first} == {"r2"}
    rest = metastore.lease_available("e", 100, realms=["r2"])
    assert len(rest) == 1
    assert len(metastore.lease_available("e", 100)) == 5


def test_grace_period_protects_fresh_polaris_tasks(metastore_url: str) -> None:
    store = pipeline_store(metastore_url, TaskPolicy(lease_timeout_ms=60_000))
    (fresh,) = seed(store, "r1", 1)
    now = store.now_ms()
    (old,) = seed(store, "r1", 1, create_timestamp=now - 61_000)
    leases = store.lease_available("e", 10)
    assert [lease.task_id for lease in leases] == [old.id]
    task = store.get_task("r1", fresh.id)
    assert task is not None and task.state(store.now_ms(), store.policy) is TaskState.PENDING
    store.dispose()


def test_expired_lease_is_released_to_another_executor(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    (first,) = metastore.lease_available("exec-1", 1)
    assert metastore.lease_available("exec-2", 1) == []
    _age_lease(metastore, "r1", task.id, metastore.policy.lease_timeout_ms + 1)
    (second,) = metastore.lease_available("exec-2", 1)
    assert second.attempt == first.attempt + 1
    # The first holder's fencing check now fails, and so does every move it makes.
    assert metastore.holds(first) is False
    assert restart_lease(metastore, first) is None
    assert metastore.complete(first) is CompleteOutcome.LEASE_LOST
    assert metastore.fail(first, "late").outcome is FailOutcome.LEASE_LOST
    assert metastore.holds(second) is True
    assert metastore.get_task("r1", task.id) is not None


def test_same_executor_release_is_fenced_by_attempt(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    (first,) = metastore.lease_available("same", 1)
    _age_lease(metastore, "r1", task.id, metastore.policy.lease_timeout_ms + 1)
    (second,) = metastore.lease_available("same", 1)
    assert metastore.holds(first) is False
    assert metastore.holds(second) is True


def test_cas_lost_to_concurrent_writer_skips_only_that_task(metastore: Metastore) -> None:
    tasks = seed(metastore, "r1", 3)
    stale = metastore.get_task("r1", tasks[0].id)
    assert stale is not None
    # Someone else (a Polaris server) leases the task after we read it.
    _set_props(
        metastore,
        "r1",
        tasks[0].id,
        **{Prop.EXECUTOR: "polaris", Prop.START_TIME: str(metastore.now_ms())},
    )
    assert metastore._cas_lease(stale, "us") is None
    others = metastore.lease_available("us", 10)
    assert {lease.task_id for lease in others} == {tasks[1].id, tasks[2].id}


def test_renew_extends_lease_and_keeps_holder(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    (lease,) = metastore.lease_available("e", 1)
    # Half its time gone: old enough that a renewal shows, with room for a loaded machine
    # (a second to spare made this fail when the renewal came a second late).
    _age_lease(metastore, "r1", task.id, metastore.policy.lease_timeout_ms // 2)
    renewed = restart_lease(metastore, lease)
    assert renewed is not None and renewed.entity_version > lease.entity_version
    row = metastore.get_task("r1", task.id)
    assert row is not None and metastore.now_ms() - (row.start_time_ms or 0) < 5_000
    # The fencing token is (executor, attempt): renewal does not invalidate the old handle.
    assert metastore.holds(lease) and metastore.holds(renewed)


def test_take_over_moves_lease_to_new_executor(metastore: Metastore) -> None:
    seed(metastore, "r1", 1)
    (lease,) = metastore.lease_available("sensor", 1)
    run = restart_lease(metastore, lease, "run-123")
    assert run is not None and run.attempt == lease.attempt
    assert metastore.holds(run) and not metastore.holds(lease)


def test_database_clock_not_local_clock(
    metastore: Metastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = seed(metastore, "r1", 2)
    (lease,) = metastore.lease_available("polaris", 1)
    orphan = second if lease.task_id == first.id else first
    real = time.time
    for skew in (+6 * 3600, -6 * 3600):
        monkeypatch.setattr(time, "time", lambda s=skew: real() + s)
        got = metastore.lease_available(f"skewed{skew}", 10)
        # The orphan is found once, the live lease is never stolen.
        assert [g.task_id for g in got] in ([orphan.id], [])
        assert metastore.holds(lease)
    row = metastore.get_task("r1", orphan.id)
    assert row is not None and row.executor_id is not None


# ------------------------------------------------------- attempt results


def test_complete_deletes_row_and_second_complete_is_success(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    (lease,) = metastore.lease_available("e", 1)
    assert metastore.complete(lease) is CompleteOutcome.DONE
    assert metastore.get_task("r1", task.id) is None
    assert metastore.complete(lease) is CompleteOutcome.ALREADY_GONE


def test_failure_records_result_and_backs_off(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    (lease,) = metastore.lease_available("e", 1)
    record = metastore.fail(lease, "boom: " + "x" * 10_000, run_id="run-42")
    assert record.outcome is FailOutcome.BACKING_OFF and record.next_attempt_ms is not None
    row = metastore.get_task("r1", task.id)
    assert row is not None
    assert row.properties[Prop.STATUS] == "failed"
    assert row.properties[Prop.RUN_ID] == "run-42"
    assert (
        row.properties[Prop.ERROR].startswith("boom: ") and len(row.properties[Prop.ERROR]) <= 2000
    )
    assert int(row.properties[Prop.END_TIME]) >= (row.start_time_ms or 0)
    assert row.properties[Prop.EXECUTOR] == "e"  # lease fields are kept
    now = metastore.now_ms()
    assert row.state(now, metastore.policy) is TaskState.BACKING_OFF
    assert metastore.lease_available("e", 1) == []
    # Once the backoff has passed the task is orphaned again, long before the lease would expire.
    _set_props(metastore, "r1", task.id, **{Prop.NEXT_ATTEMPT: str(now - 1)})
    (again,) = metastore.lease_available("e2", 1)
    assert again.attempt == 2
    row = metastore.get_task("r1", task.id)
    assert row is not None and Prop.END_TIME not in row.properties


def test_backoff_grows_exponentially_with_jitter() -> None:
    policy = TaskPolicy(backoff_base_ms=1_000, backoff_max_ms=60_000)
    assert [policy.backoff_ms(a, 0.0) for a in (1, 2, 3)] == [500, 1_000, 2_000]
    assert [policy.backoff_ms(a, 0.999) for a in (1, 2, 3)] == [999, 1_999, 3_998]
    assert policy.backoff_ms(30, 0.999) <= 60_000


def test_dead_letter_after_max_attempts_and_requeue(metastore_url: str) -> None:
    store = pipeline_store(
        metastore_url,
        TaskPolicy(grace_ms=0, max_attempts=3, backoff_base_ms=0, backoff_max_ms=0),
    )
    (task,) = seed(store, "r1", 1)
    outcomes = []
    for _ in range(3):
        (lease,) = store.lease_available("e", 1)
        outcomes.append(store.fail(lease, "still broken").outcome)
    assert outcomes == [FailOutcome.BACKING_OFF, FailOutcome.BACKING_OFF, FailOutcome.DEAD]
    row = store.get_task("r1", task.id)
    assert row is not None and row.state(store.now_ms(), store.policy) is TaskState.DEAD
    assert store.lease_available("e", 1) == []
    assert store.requeue("r1", task.id) is TaskState.ORPHANED
    row = store.get_task("r1", task.id)
    assert row is not None and row.attempt_count == 0 and row.last_error == "still broken"
    (lease,) = store.lease_available("e", 1)
    assert lease.attempt == 1
    with pytest.raises(MetastoreError, match="is leased"):
        store.requeue("r1", task.id)
    with pytest.raises(MetastoreError, match="no task"):
        store.requeue("r1", 12345)
    store.dispose()


def test_task_leased_max_times_without_result_is_dead(metastore_url: str) -> None:
    """A task that kills its worker every time must not be retried forever."""
    store = pipeline_store(metastore_url, TaskPolicy(grace_ms=0, max_attempts=2))
    (task,) = seed(store, "r1", 1, extra={Prop.ATTEMPT_COUNT: "2"})
    row = store.get_task("r1", task.id)
    assert row is not None and row.state(store.now_ms(), store.policy) is TaskState.DEAD
    assert store.lease_available("e", 1) == []
    store.dispose()


# ------------------------------------------------------ children, hostile rows


def test_children_created_leased_by_holder_in_one_transaction(metastore: Metastore) -> None:
    seed(metastore, "r1", 1)
    (parent,) = metastore.lease_available("run", 1)
    kids = [batch_task("r1") for _ in range(3)]
    leases = metastore.insert_tasks(kids, holder=parent)
    assert len(leases) == 3 and all(metastore.holds(lease) for lease in leases)
    # Created by us: once the holder's lease lapses they are orphaned with no grace period.
    row = metastore.get_task("r1", kids[0].id)
    assert row is not None and row.created_by_us
    _set_props(metastore, "r1", kids[0].id, **{Prop.START_TIME: "0"})
    assert [lease.task_id for lease in metastore.lease_available("other", 10)] == [kids[0].id]


def test_children_refused_when_holder_lost_lease(metastore: Metastore) -> None:
    (task,) = seed(metastore, "r1", 1)
    (parent,) = metastore.lease_available("run", 1)
    _age_lease(metastore, "r1", task.id, metastore.policy.lease_timeout_ms + 1)
    metastore.lease_available("thief", 1)
    with pytest.raises(LeaseLost):
        metastore.insert_tasks([batch_task("r1")], holder=parent)
    assert metastore.count_tasks() == 1


def test_undecodable_properties_are_kept_and_leased_alone(metastore: Metastore) -> None:
    seed(metastore, "r1", 2)
    pg = metastore.dialect == "postgresql"
    bad_props = "[1, 2, 3]" if pg else "{not json"
    insert_raw_task(metastore, "r1", 77, "evil", json.loads(bad_props) if pg else bad_props)
    listed = {t.id: t for t in metastore.list_tasks()}
    assert len(listed) == 3 and listed[77].properties_error is not None
    leases = metastore.lease_available("e", 10)
    assert len(leases) == 3
    evil = metastore.get_task("r1", 77)
    assert evil is not None and evil.properties_error is None
    assert (
        json.loads(evil.properties[Prop.ORIGINAL])
        if metastore.dialect == "postgresql"
        else evil.properties[Prop.ORIGINAL] == bad_props
    )
    (evil_lease,) = [lease for lease in leases if lease.task_id == 77]
    record = metastore.fail(evil_lease, "properties were not a JSON object")
    assert record.outcome is FailOutcome.BACKING_OFF


def test_sql_state_rule_matches_python_rule(metastore: Metastore) -> None:
    """The PostgreSQL CASE and TaskRow.state classify a zoo of rows identically."""
    now = metastore.now_ms()
    timeout = metastore.policy.lease_timeout_ms
    zoo = [
        {},
        {Prop.EXECUTOR: "x", Prop.START_TIME: str(now)},
        {Prop.EXECUTOR: "x", Prop.START_TIME: str(now - timeout - 5)},
        {Prop.EXECUTOR: "x", Prop.START_TIME: "garbage"},
        {Prop.EXECUTOR: "", Prop.START_TIME: str(now)},
        {Prop.EXECUTOR: "x", Prop.START_TIME: str(now), Prop.END_TIME: str(now + 1)},
        {Prop.STATUS: "dead"},
        {Prop.ATTEMPT_COUNT: "99"},
        {Prop.ATTEMPT_COUNT: "-4"},
        {Prop.NEXT_ATTEMPT: str(now + 100_000)},
        {Prop.NEXT_ATTEMPT: str(now - 100_000)},
        {Prop.CREATED_BY: "polaris-pipeline"},
        {Prop.TASK_TYPE: "1", Prop.DATA: '{"catalogId":0,"id":5,"typeCode":3}'},  # a role
        {Prop.TASK_TYPE: "1", Prop.DATA: '{"catalogId":1,"id":6,"typeCode":7}'},  # a table: held
    ]
    for extra in zoo:
        seed(metastore, "zoo", 1, extra=extra, create_timestamp=now + 1_000_000)
        seed(metastore, "zoo", 1, extra=extra, create_timestamp=now - 10_000_000)
    strict = Metastore(
        engine=metastore.engine,
        policy=TaskPolicy(lease_timeout_ms=timeout, grace_ms=500_000, hold_ms=20_000_000),
    )
    _, rows = strict.tasks_with_state(["zoo"])
    expected: dict[TaskState, int] = {}
    for _, state in rows:
        expected[state] = expected.get(state, 0) + 1
    counted = strict.count_by_state(["zoo"])["zoo"]
    assert dict(counted) == expected
    assert set(expected) == set(TaskState)  # the zoo reaches every state


def test_unreachable_database_is_one_clear_error() -> None:
    store = Metastore("postgresql+psycopg://nobody:s3cret-pw@127.0.0.1:1/none")
    with pytest.raises(MetastoreError) as info:
        store.check_schema()
    assert "s3cret-pw" not in str(info.value)
    assert "127.0.0.1" in str(info.value)


def test_renew_held_by_renews_only_that_executors_live_leases(metastore: Metastore) -> None:
    seed(metastore, "r1", 2)
    seed(metastore, "r2", 1)
    mine = metastore.lease_available("mine", 1, realms=["r1"])
    other = metastore.lease_available("other", 1, realms=["r1"])
    kids = metastore.insert_tasks([batch_task("r1") for _ in range(2)], holder=mine[0])
    metastore.lease_available("mine", 1, realms=["r2"])
    for lease in [*mine, *kids, *other]:
        _age_lease(metastore, "r1", lease.task_id, 30_000)
    assert metastore.renew_held_by("r1", "mine") == 3
    now = metastore.now_ms()
    fresh = {t.id: now - (t.start_time_ms or 0) < 10_000 for t in metastore.list_tasks(["r1"])}
    assert all(fresh[lease.task_id] for lease in [*mine, *kids])
    assert not fresh[other[0].task_id]
    # A released (failed) lease is not revived by the heartbeat.
    metastore.fail(kids[0], "x")
    assert metastore.renew_held_by("r1", "mine") == 2


def test_a_failure_that_reads_a_renewal_stamped_after_its_clock_still_ends_the_attempt(
    metastore: Metastore,
) -> None:
    # The heartbeat can commit between the failure's clock read and its row read: the
    # row then starts later than the failure's "now". The attempt must still end, or
    # the holder's heartbeat renews its own failed task for as long as it lives.
    (task,) = seed(metastore, "r1", 1)
    (lease,) = metastore.lease_available("e", 1)
    later = metastore.now_ms() + 5_000
    _set_props(metastore, "r1", task.id, **{Prop.START_TIME: str(later)})
    record = metastore.fail(lease, "boom")
    assert record.outcome is FailOutcome.BACKING_OFF
    row = metastore.get_task("r1", task.id)
    assert row is not None and int(row.properties[Prop.END_TIME]) >= later
    assert row.state(metastore.now_ms(), metastore.policy) is TaskState.BACKING_OFF
    assert metastore.renew_held_by("r1", "e") == 0
