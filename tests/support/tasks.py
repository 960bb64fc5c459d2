"""Building TASK rows for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.restricted_role import admin_connection
from builders.tasks import batch_task, insert_row
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.schema import version as version_table
from polaris_pipeline.tasks import payloads
from polaris_pipeline.tasks.manifest_codec import ManifestFileRef
from polaris_pipeline.tasks.model import (
    CATALOG_TYPE_CODE,
    TASK_TYPE_CODE,
    NewTask,
    TaskPolicy,
    TaskType,
)


def seed(store: Metastore, realm: str, n: int, **kwargs: Any) -> list[NewTask]:
    tasks = [batch_task(realm, **kwargs) for _ in range(n)]
    store.insert_tasks(tasks)
    return tasks


def manifest_ref(path: str = "file:///wh/ns/t/metadata/m.avro") -> ManifestFileRef:
    """A data manifest's ManifestFile record with only Polaris's required fields set."""
    return ManifestFileRef(
        manifest_path=path,
        manifest_length=100,
        partition_spec_id=0,
        content=0,
        sequence_number=1,
        min_sequence_number=1,
        added_snapshot_id=1,
        added_files_count=None,
        existing_files_count=None,
        deleted_files_count=None,
        added_rows_count=None,
        existing_rows_count=None,
        deleted_rows_count=None,
        partitions=None,
        key_metadata=None,
        first_row_id=None,
    )


def insert_raw_task(
    store: Metastore,
    realm: str,
    task_id: int,
    name: str,
    properties: Any,
    *,
    create_timestamp: int | None = None,
) -> None:
    """Insert a TASK row whose properties are written as given: a str that is not JSON
    (SQLite's TEXT column), or any JSON value (PostgreSQL's JSONB), for hostile rows."""
    now = store.now_ms()
    insert_row(
        store,
        {
            "realm_id": realm,
            "catalog_id": 0,
            "id": task_id,
            "parent_id": 0,
            "name": name,
            "entity_version": 1,
            "type_code": TASK_TYPE_CODE,
            "sub_type_code": 0,
            "create_timestamp": now - 1 if create_timestamp is None else create_timestamp,
            "drop_timestamp": 0,
            "purge_timestamp": 0,
            "to_purge_timestamp": 0,
            "last_update_timestamp": now,
            "properties": properties,
            "internal_properties": {},
            "grant_records_version": 1,
        },
    )


def catalog_row(realm: str, catalog_id: int, name: str | None = None) -> dict[str, Any]:
    """A catalog's ``entities`` row (for ``insert_row``), named ``name`` or ``catalog_<id>``."""
    return {
        "realm_id": realm,
        "catalog_id": 0,
        "id": catalog_id,
        "parent_id": 0,
        "name": name or f"catalog_{catalog_id}",
        "entity_version": 1,
        "type_code": CATALOG_TYPE_CODE,
        "sub_type_code": 0,
        "create_timestamp": 1,
        "drop_timestamp": 0,
        "purge_timestamp": 0,
        "to_purge_timestamp": 0,
        "last_update_timestamp": 1,
        "properties": {},
        "internal_properties": {},
        "grant_records_version": 1,
    }


def sqlite_metastore(directory: Path) -> Metastore:
    """A fresh SQLite metastore in ``directory``: no grace period, a one-minute lease."""
    store = Metastore(
        f"sqlite:///{directory}/polaris.db",
        policy=TaskPolicy(lease_timeout_ms=60_000, grace_ms=0),
    )
    store.init_schema()
    return store


def set_schema_version(store: Metastore, value: int | None) -> None:
    """Make ``store``'s ``version`` row say ``value`` (None: no row at all)."""
    with admin_connection(store) as conn:
        conn.execute(version_table.delete().where(version_table.c.version_key == "version"))
        if value is not None:
            conn.execute(version_table.insert().values(version_key="version", version_value=value))


def purge_child(
    realm: str,
    parent: str,
    table: tuple[str, str],
    files: list[str],
    *,
    create_timestamp: int,
) -> NewTask:
    """A BATCH child as a Polaris table cleanup names and encodes it."""
    table_id = payloads.TableIdentifier((table[0],), table[1])
    data = payloads.encode_batch_cleanup(payloads.BatchCleanupPayload(table_id, tuple(files)))
    return NewTask(
        realm_id=realm,
        id=new_entity_id(),
        name=payloads.batch_cleanup_task_name(parent, files),
        properties=payloads.task_properties(TaskType.BATCH_FILE_CLEANUP, data),
        internal_properties={"storageLocation": f"file:///wh/{table[0]}/{table[1]}"},
        create_timestamp=create_timestamp,
    )


def move_drop_back(store: Metastore, realm: str, task_id: int, ms: int) -> None:
    """Make task ``task_id`` look ``ms`` older (its creation, the drop time a hold counts
    from), as if the hold had run its course."""
    from sqlalchemy import update

    from polaris_pipeline.metastore.schema import entities

    with admin_connection(store) as conn:
        moved = conn.execute(
            update(entities)
            .where(entities.c.realm_id == realm, entities.c.id == task_id)
            .values(create_timestamp=entities.c.create_timestamp - ms)
        )
        assert moved.rowcount == 1, f"no task {task_id} in realm {realm}"
