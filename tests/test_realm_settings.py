"""Per-realm lease timeout, grace period and metadata batch size over one global default."""

from __future__ import annotations

import dataclasses
import json
import pickle
from collections import Counter

import pytest

from builders.tasks import batch_task, drop_table_task
from polaris_pipeline.execution.runner import Runner
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.settings.realm import DEFAULT_METADATA_BATCH_SIZE, RealmOverride
from polaris_pipeline.tasks.model import Prop, TaskPolicy, TaskState
from polaris_pipeline.tasks.payloads import decode_batch_cleanup
from tests.support.iceberg import Warehouse


def _store(metastore: Metastore, policy: TaskPolicy) -> Metastore:
    return Metastore(engine=metastore.engine, policy=policy)


def _leased_ago(store: Metastore, realm: str, ms: int) -> int:
    """A task another executor leased ``ms`` ago (database clock); returns its id."""
    start = store.now_ms() - ms
    task = batch_task(
        realm,
        extra={Prop.EXECUTOR: "elsewhere", Prop.START_TIME: str(start), Prop.ATTEMPT_COUNT: "1"},
    )
    store.insert_tasks([task])
    return task.id


def _states(store: Metastore) -> dict[int, TaskState]:
    _, rows = store.tasks_with_state()
    return {t.id: s for t, s in rows}


def test_a_realm_with_a_short_lease_timeout_gets_its_tasks_back(metastore: Metastore) -> None:
    policy = TaskPolicy(
        lease_timeout_ms=60_000,
        grace_ms=0,
        realm_overrides={"A": RealmOverride(lease_timeout_ms=1_000)},
    )
    store = _store(metastore, policy)
    in_a, in_b = _leased_ago(store, "A", 2_000), _leased_ago(store, "B", 2_000)
    assert _states(store) == {in_a: TaskState.ORPHANED, in_b: TaskState.LEASED}
    counts = store.count_by_state()  # in SQL on PostgreSQL
    assert counts["A"] == Counter({TaskState.ORPHANED: 1})
    assert counts["B"] == Counter({TaskState.LEASED: 1})
    leases = store.lease_available("sweeper", 10)
    assert [(lease.realm_id, lease.task_id) for lease in leases] == [("A", in_a)]
    # The new holder's lease lasts A's timeout, not the global one.
    remaining = store.held_for_ms(leases[0])
    assert remaining is not None and 0 < remaining <= 1_000


def test_without_overrides_both_realms_follow_the_global_timeout(metastore: Metastore) -> None:
    store = _store(metastore, TaskPolicy(lease_timeout_ms=60_000, grace_ms=0))
    _leased_ago(store, "A", 2_000)
    _leased_ago(store, "B", 2_000)
    assert store.lease_available("sweeper", 10) == []


def test_a_realm_with_a_short_grace_period(metastore: Metastore) -> None:
    policy = TaskPolicy(
        lease_timeout_ms=60_000,
        grace_ms=500_000,
        realm_overrides={"A": RealmOverride(grace_ms=1_000)},
    )
    store = _store(metastore, policy)
    created = store.now_ms() - 2_000
    in_a, in_b = (
        batch_task("A", create_timestamp=created),
        batch_task("B", create_timestamp=created),
    )
    store.insert_tasks([in_a, in_b])
    assert _states(store) == {in_a.id: TaskState.ORPHANED, in_b.id: TaskState.PENDING}
    assert store.count_by_state()["B"] == Counter({TaskState.PENDING: 1})
    assert [lease.task_id for lease in store.lease_available("sweeper", 10)] == [in_a.id]


def test_a_realm_timeout_override_moves_its_default_grace(metastore: Metastore) -> None:
    """Grace unset: each realm's grace is its own lease timeout."""
    policy = TaskPolicy(
        lease_timeout_ms=600_000, realm_overrides={"A": RealmOverride(lease_timeout_ms=1_000)}
    )
    store = _store(metastore, policy)
    created = store.now_ms() - 2_000
    in_a, in_b = (
        batch_task("A", create_timestamp=created),
        batch_task("B", create_timestamp=created),
    )
    store.insert_tasks([in_a, in_b])
    assert _states(store) == {in_a.id: TaskState.ORPHANED, in_b.id: TaskState.PENDING}
    assert [lease.task_id for lease in store.lease_available("sweeper", 10)] == [in_a.id]


def test_renewal_uses_the_realms_timeout(metastore: Metastore) -> None:
    """A lease past A's timeout is not renewed by its old holder, while B's is."""
    policy = TaskPolicy(
        lease_timeout_ms=60_000,
        grace_ms=0,
        realm_overrides={"A": RealmOverride(lease_timeout_ms=1_000)},
    )
    store = _store(metastore, policy)
    _leased_ago(store, "A", 2_000)
    _leased_ago(store, "B", 2_000)
    assert store.renew_held_by("A", "elsewhere") == 0
    assert store.renew_held_by("B", "elsewhere") == 1


def test_metadata_batch_size_per_realm_reaches_the_cleanup(
    local_warehouse: Warehouse, metastore: Metastore
) -> None:
    wh = local_warehouse
    policy = TaskPolicy(
        lease_timeout_ms=60_000,
        grace_ms=0,
        realm_overrides={"A": RealmOverride(metadata_batch_size=1)},
    )
    store = _store(metastore, policy)
    sizes: dict[str, list[int]] = {}
    for realm in ("A", "B"):
        store.insert_tasks(
            [drop_table_task(wh.build(f"t_{realm.lower()}", appends=4), realm_id=realm)]
        )
        with Runner(store, wh.config, resolver=wh.resolver) as runner:
            (lease,) = runner.lease(1, [realm])
            outcome = runner.execute(lease)
        assert outcome.ok, outcome.error
        children = [store.get_task(realm, child.task_id) for child in outcome.children]
        sizes[realm] = [
            len(decode_batch_cleanup(c.properties[Prop.DATA]).batch_files)
            for c in children
            if c is not None and c.properties[Prop.TASK_TYPE] == "3"
        ]
    assert sizes["A"] and max(sizes["A"]) == 1
    assert max(sizes["B"]) > 1 and max(sizes["B"]) <= DEFAULT_METADATA_BATCH_SIZE
    assert sum(sizes["A"]) == sum(sizes["B"])  # the same files, cut differently


def test_policy_for_realm_resolution() -> None:
    policy = TaskPolicy(
        lease_timeout_ms=300_000,
        grace_ms=None,
        metadata_batch_size=20,
        realm_overrides={
            "A": RealmOverride(lease_timeout_ms=5_000),
            "B": RealmOverride(grace_ms=0, metadata_batch_size=3),
        },
    )
    a, b, c = policy.for_realm("A"), policy.for_realm("B"), policy.for_realm("C")
    assert (a.lease_timeout_ms, a.effective_grace_ms, a.metadata_batch_size) == (5_000, 5_000, 20)
    assert (b.lease_timeout_ms, b.effective_grace_ms, b.metadata_batch_size) == (300_000, 0, 3)
    assert c is policy
    assert policy.shortest_lease_timeout_ms == 5_000
    # A global grace, set, is every realm's that sets none: its lease timeout is not.
    set_globally = dataclasses.replace(policy, grace_ms=60_000)
    assert set_globally.for_realm("A").effective_grace_ms == 60_000
    assert set_globally.for_realm("B").effective_grace_ms == 0
    assert a.max_attempts == policy.max_attempts and a.realm_overrides == {}
    # Picklable (a policy travels to worker processes) and equal after the trip.
    assert pickle.loads(pickle.dumps(policy)).for_realm("A") == a
    # The caller's mapping is copied: changing it later changes nothing.
    overrides = {"A": RealmOverride(lease_timeout_ms=5_000)}
    frozen = TaskPolicy(realm_overrides=overrides)
    overrides["A"] = RealmOverride(lease_timeout_ms=9_000)
    assert frozen.for_realm("A").lease_timeout_ms == 5_000


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"lease_timeout_ms": 0}, "lease timeout must be positive"),
        ({"grace_ms": -1}, "grace period must not be negative"),
        ({"metadata_batch_size": 0}, "batch size must be at least 1"),
        # Past a Java long, as the section's own numbers: Polaris stores none larger.
        ({"lease_timeout_ms": 2**63}, "lease timeout ms must be at most 9223372036854775807"),
        ({"grace_ms": 2**63}, "grace ms must be at most 9223372036854775807"),
        ({"metadata_batch_size": 2**63}, "metadata batch size must be at most 92233720"),
        ({"lease_timeout": 5}, "unknown override"),
        # A typo names the override it is nearest, as an unknown key of a section does.
        ({"grace": 5}, r"unknown override\(s\) grace \(did you mean grace_ms\?\)$"),
        ({"lease_timeout_ms": "5000"}, "must be an integer"),
        ({"lease_timeout_ms": True}, "must be an integer"),
        ({"lease_timeout_ms": 1.5}, "must be an integer"),
        ([], "must be a JSON object"),
    ],
)
def test_bad_overrides_are_refused(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        RealmOverride.from_json_obj(value, realm="A")
    assert "'A'" in str(info.value)


def test_overrides_from_json() -> None:
    raw = json.loads('{"A": {"lease_timeout_ms": 1000, "grace_ms": null}, "B": {}}')
    overrides = {realm: RealmOverride.from_json_obj(v, realm=realm) for realm, v in raw.items()}
    assert overrides == {"A": RealmOverride(lease_timeout_ms=1_000), "B": RealmOverride()}
    with pytest.raises(ValueError, match="RealmOverride"):
        TaskPolicy(realm_overrides={"A": {"lease_timeout_ms": 1}})  # type: ignore[dict-item]


def test_an_unknown_key_of_the_model_itself_names_the_nearest_override() -> None:
    # Built in Python (build_defs' RealmOverrideConfig), not read from a mapping.
    with pytest.raises(
        ValueError, match=r"unknown setting 'grace' of RealmOverride \(did you mean grace_ms\?\)"
    ):
        RealmOverride(grace=5)  # type: ignore[call-arg]
