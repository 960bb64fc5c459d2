"""The pipeline's PostgreSQL role under ``grant-role``'s grants and row-level security.

The role logs in with its own password (row-level security does not bind a superuser
or the table's owner, so ``SET ROLE`` from the admin would prove nothing). Through it
every path the pipeline writes by runs (insert, batch lease, heartbeat, failure,
requeue, per-row lease, complete, children, discard, a task event), and PostgreSQL
itself refuses to change, delete or create any row but a task.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.pool import NullPool

from builders.restricted_role import apply_role_script, login_role, restrict, restricted_role_wanted
from polaris_pipeline.cli import main
from polaris_pipeline.metastore import Metastore, queries
from polaris_pipeline.metastore.privileges import role_script
from polaris_pipeline.metastore.transitions import CompleteOutcome, DiscardOutcome, FailOutcome
from polaris_pipeline.tasks.model import TABLE_LIKE_TYPE_CODE, TaskPolicy, TaskState
from polaris_pipeline.tasks.ref import Lease
from tests.support.tasks import batch_task
from tests.support.unhandled import polaris_cleanup_task

REALM = "POLARIS"
TABLE_ID = 777
POLICY = TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, max_attempts=3)

ON_POSTGRESQL = pytest.mark.parametrize("metastore_url", ["postgresql"], indirect=True)


def _table_row(now: int) -> dict[str, Any]:
    """A live table's row (catalog 1, namespace 2)."""
    return {
        "realm_id": REALM,
        "catalog_id": 1,
        "id": TABLE_ID,
        "parent_id": 2,
        "name": "live",
        "entity_version": 1,
        "type_code": TABLE_LIKE_TYPE_CODE,
        "sub_type_code": 1,
        "create_timestamp": now,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": now,
        "properties": {"location": "s3://b/wh/ns/live"},
        "internal_properties": {},
        "grant_records_version": 1,
    }


@pytest.fixture
def admin(metastore_url: str) -> Iterator[Metastore]:
    """The Polaris schema, created by the admin, holding one live table."""
    store = Metastore(metastore_url, policy=POLICY)
    store.init_schema()
    with store.engine.begin() as conn:
        conn.execute(queries.INSERT_TASKS.build(store.dialect), [_table_row(store.now_ms())])
    yield store
    store.dispose()


@pytest.fixture
def database(admin: Metastore) -> str:
    name = admin.url.database
    assert name is not None
    return name


def _table_as_admin(admin: Metastore) -> Any:
    with admin.engine.connect() as conn:
        return conn.execute(
            text("SELECT * FROM polaris_schema.entities WHERE id = :id"), {"id": TABLE_ID}
        ).one()


def _forgeries(conn: Any) -> list[str]:
    """Each write of the live table's row, or of a task into another type, that PostgreSQL
    refused outright (each in a savepoint); the UPDATE and DELETE it filters count 0 rows."""
    refused = []
    update = conn.execute(
        text("UPDATE polaris_schema.entities SET properties = '{}' WHERE id = :id"),
        {"id": TABLE_ID},
    )
    delete = conn.execute(
        text("DELETE FROM polaris_schema.entities WHERE id = :id"), {"id": TABLE_ID}
    )
    assert (update.rowcount, delete.rowcount) == (0, 0)
    for name, statement in {
        "insert a table": "INSERT INTO polaris_schema.entities (realm_id, catalog_id, id, "
        "parent_id, name, entity_version, type_code, sub_type_code, create_timestamp, "
        "drop_timestamp, purge_timestamp, to_purge_timestamp, last_update_timestamp, "
        "properties, internal_properties, grant_records_version) VALUES "
        f"('{REALM}', 1, 778, 2, 'forged', 1, {TABLE_LIKE_TYPE_CODE}, 1, 0, 0, 0, 0, 0, "
        "'{}', '{}', 1)",
        "turn a task into a table": "UPDATE polaris_schema.entities "
        f"SET type_code = {TABLE_LIKE_TYPE_CODE} WHERE type_code = 8",
    }.items():
        savepoint = conn.begin_nested()
        try:
            conn.execute(text(statement))
        except ProgrammingError as exc:
            assert "row-level security" in str(exc.orig), exc
            refused.append(name)
        savepoint.rollback()
    return refused


@ON_POSTGRESQL
def test_the_restricted_role_runs_every_write_path_and_changes_only_tasks(
    admin: Metastore, database: str
) -> None:
    table_before = _table_as_admin(admin)
    with login_role(database) as (role, url):
        restrict(database, role)
        store = Metastore(url, policy=POLICY)
        try:
            old = store.now_ms() - 3_600_000
            first, second = batch_task(REALM, create_timestamp=old), batch_task(REALM)
            unhandled = polaris_cleanup_task(REALM, 4, entity_id=1004)
            store.insert_tasks([first, unhandled])  # INSERT_TASKS
            [lease] = store.lease_available("pp-a", 5, [REALM])  # LEASE_BATCH
            assert lease.task_id == first.id
            store.insert_tasks([second])
            assert store.renew_held_by(REALM, "pp-a") == 1  # RENEW_HELD_BY
            children = store.insert_tasks([batch_task(REALM)], holder=lease)
            assert [c.executor_id for c in children] == ["pp-a"]
            record = store.fail(lease, "boom")  # CAS_WRITE
            assert record.outcome is FailOutcome.BACKING_OFF, record
            assert store.requeue(REALM, first.id) is TaskState.ORPHANED  # CAS_WRITE

            again = store.lease_task(REALM, first.id, "pp-b")  # CAS_WRITE
            assert isinstance(again, Lease)
            assert store.complete(again) is CompleteOutcome.DONE  # COMPLETE
            [discarded] = store.discard_unhandled([unhandled.id], [REALM])  # DISCARD
            assert discarded.outcome is DiscardOutcome.DISCARDED, discarded
            with store.engine.begin() as conn:
                conn.execute(
                    queries.INSERT_EVENT.build(
                        store.dialect, REALM, None, "e-1", "BEFORE_ATTEMPT_TASK", {}
                    )
                )
                # The role reads every entity: the overlap checks judge live tables.
                assert (
                    conn.execute(
                        text("SELECT name FROM polaris_schema.entities WHERE id = :id"),
                        {"id": TABLE_ID},
                    ).scalar_one()
                    == "live"
                )
                assert _forgeries(conn) == ["insert a table", "turn a task into a table"]
            assert store.get_task(REALM, first.id) is None
            assert {t.id for t in store.list_tasks([REALM])} == {second.id, children[0].task_id}
        finally:
            store.dispose()
    assert _table_as_admin(admin) == table_before


@ON_POSTGRESQL
def test_without_the_policy_the_same_grants_would_change_a_table(
    admin: Metastore, database: str
) -> None:
    """The control: the table grants alone (the guide before row-level security) let the
    role rewrite the live table, so it is the policy that refuses it above."""
    with login_role(database) as (role, url):
        grants = [line for line in role_script(role).splitlines() if line.startswith("GRANT ")]
        engine = create_engine(database_url_of(admin), poolclass=NullPool)
        with engine.begin() as conn:
            for grant in grants:
                conn.execute(text(grant))
        engine.dispose()
        restricted = create_engine(url, poolclass=NullPool)
        try:
            with restricted.connect() as conn, conn.begin() as tx:
                changed = conn.execute(
                    text("UPDATE polaris_schema.entities SET properties = '{}' WHERE id = :id"),
                    {"id": TABLE_ID},
                )
                assert changed.rowcount == 1
                tx.rollback()
        finally:
            restricted.dispose()


def database_url_of(store: Metastore) -> str:
    return store.url.render_as_string(hide_password=False)


@ON_POSTGRESQL
def test_the_script_refuses_and_changes_nothing_when_another_role_would_lose_its_rows(
    admin: Metastore, database: str
) -> None:
    with login_role(database) as (role, _), login_role(database) as (other, _):
        with admin.engine.begin() as conn:
            conn.execute(text(f'GRANT SELECT ON polaris_schema.entities TO "{other}"'))
        done = apply_role_script(database, role)
        assert done.returncode != 0
        assert f"would hide every row from {other}:" in done.stderr, done.stderr
        with admin.engine.connect() as conn:
            secured = conn.execute(
                text(
                    "SELECT relrowsecurity FROM pg_class "
                    "WHERE oid = 'polaris_schema.entities'::regclass"
                )
            ).scalar_one()
            granted = conn.execute(
                text("SELECT has_table_privilege(:r, 'polaris_schema.entities', 'UPDATE')"),
                {"r": role},
            ).scalar_one()
        assert (secured, granted) == (False, False)
        # Given a policy of its own, the other role no longer blocks the script.
        with admin.engine.begin() as conn:
            conn.execute(
                text(
                    f'CREATE POLICY "{other}_all" ON polaris_schema.entities TO "{other}" '
                    "USING (true)"
                )
            )
        restrict(database, role)
        # The script runs again (a new release, a new schema version): same result.
        restrict(database, role)


def test_grant_role_prints_the_script_and_refuses_a_name_that_is_not_plain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["grant-role", "polaris_cleanup"]) == 0
    assert capsys.readouterr().out == role_script("polaris_cleanup")
    with pytest.raises(SystemExit) as refused:
        main(["grant-role", 'x"; DROP TABLE entities; --'])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("polaris-pipeline grant-role: error: argument ROLE: role name 'x\"; DROP")
    assert len(err.strip().splitlines()) == 1


def test_the_operator_guide_shows_the_script_grant_role_prints() -> None:
    """Section 2's text block is the script for polaris_cleanup, its refusal block cut
    to one line."""
    guide = (Path(__file__).resolve().parent.parent / "docs/operator-guide.md").read_text()
    [shown] = re.findall(r"```text\n(BEGIN;\n.*?COMMIT;\n)```", guide, re.S)
    script = role_script("polaris_cleanup")
    refusal = re.search(r"^DO \$\$\nDECLARE hidden.*?^END \$\$;\n", script, re.M | re.S)
    assert refusal is not None
    elided = "DO $$ ... (refuses when another role would lose sight of the rows: below) ... $$;\n"
    assert shown == script.replace(refusal[0], elided)


@ON_POSTGRESQL
def test_the_suite_hands_the_pipeline_the_restricted_role_when_asked(metastore: Metastore) -> None:
    """``PP_TEST_RESTRICTED_ROLE=1`` (``make test-restricted``): the store every metastore
    test runs the pipeline by is the guide's restricted role, which may not write a live
    table's row; otherwise it is the admin's."""
    with metastore.engine.connect() as conn:
        user, superuser = conn.execute(
            text("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
        ).one()
    if not restricted_role_wanted():
        assert superuser is True
        return
    assert user.startswith("pp_role_") and superuser is False
    with pytest.raises(ProgrammingError), metastore.engine.begin() as conn:
        conn.execute(
            queries.INSERT_TASKS.build(metastore.dialect), [_table_row(metastore.now_ms())]
        )
