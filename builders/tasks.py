"""The Polaris TASK rows that drop a table or a view, as Polaris writes them.

Built on the engine's own encoders (``tasks/payloads.py``), for the demo and the
tests: ``drop_task`` / ``drop_table_task`` make the ENTITY_CLEANUP_SCHEDULER task
of a purge, ``task_row`` the row a metastore holds for a task just inserted,
``batch_task`` a BATCH_FILE_CLEANUP task with hand-written files, ``insert_row`` any
``entities`` row exactly as given.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

from builders.restricted_role import admin_connection
from polaris_pipeline.metastore import Metastore, new_entity_id, queries
from polaris_pipeline.metastore.rows import inserted
from polaris_pipeline.tasks.model import (
    ICEBERG_VIEW_SUB_TYPE,
    NAMESPACE_LEVEL_SEPARATOR,
    TABLE_LIKE_TYPE_CODE,
    NewTask,
    Prop,
    TaskRow,
    TaskType,
)
from polaris_pipeline.tasks.payloads import (
    METADATA_LOCATION_KEY,
    PARENT_NAMESPACE_KEY,
    DroppedEntity,
    encode_dropped_entity,
    entity_cleanup_task_name,
)

ICEBERG_TABLE_SUB_TYPE = 2

if TYPE_CHECKING:
    # Annotations only: a BATCH task built here must not load pyiceberg in its process.
    from pyiceberg.table import Table


def encode_namespace(namespace: Iterable[str]) -> str:
    """As Polaris writes ``parent-namespace``: each level form-encoded (Java's
    ``URLEncoder``: a space is ``+``), the levels joined by ``%1F``."""
    return NAMESPACE_LEVEL_SEPARATOR.join(quote_plus(level, safe="") for level in namespace)


def dropped_entity(
    *,
    entity_id: int,
    name: str,
    namespace: tuple[str, ...],
    metadata_location: str,
    is_view: bool = False,
    properties: Mapping[str, str] | None = None,
) -> DroppedEntity:
    """The dropped TABLE_LIKE entity as Polaris records it (encode it for the task's ``data``
    with ``payloads.encode_dropped_entity``)."""
    now = int(time.time() * 1000)
    return DroppedEntity(
        id=entity_id,
        name=name,
        type_code=TABLE_LIKE_TYPE_CODE,
        sub_type_code=ICEBERG_VIEW_SUB_TYPE if is_view else ICEBERG_TABLE_SUB_TYPE,
        catalog_id=1,
        parent_id=2,
        entity_version=3,
        create_timestamp=now - 60_000,
        drop_timestamp=now,
        last_update_timestamp=now,
        properties=dict(properties or {}),
        internal_properties={
            METADATA_LOCATION_KEY: metadata_location,
            PARENT_NAMESPACE_KEY: encode_namespace(namespace),
        },
        grant_records_version=1,
    )


@dataclass(frozen=True)
class DropSpec:
    """What Polaris knows of a table (or view) when it drops it with purge."""

    namespace: tuple[str, ...]
    name: str
    metadata_location: str
    location: str
    table_properties: dict[str, str] = field(default_factory=dict)
    is_view: bool = False

    @classmethod
    def of_table(cls, table: Table) -> DropSpec:
        ident = table.name()
        return cls(
            namespace=tuple(ident[:-1]),
            name=ident[-1],
            metadata_location=table.metadata_location,
            location=table.location(),
            table_properties=dict(table.properties),
        )


def drop_task(
    spec: DropSpec,
    *,
    realm_id: str = "POLARIS",
    extra_internal_properties: Mapping[str, str] | None = None,
    create_timestamp: int | None = None,
) -> NewTask:
    """The ENTITY_CLEANUP_SCHEDULER task Polaris writes when ``spec`` is dropped with purge."""
    eid = new_entity_id()
    entity = dropped_entity(
        entity_id=eid,
        name=spec.name,
        namespace=spec.namespace,
        metadata_location=spec.metadata_location,
        is_view=spec.is_view,
        # Polaris records the table's base location on the entity.
        properties={"location": spec.location},
    )
    properties = {
        Prop.TASK_TYPE: TaskType.ENTITY_CLEANUP_SCHEDULER.code,
        Prop.DATA: encode_dropped_entity(entity),
    }
    internal = {**spec.table_properties, "storageLocation": spec.location}
    internal.update(extra_internal_properties or {})
    return NewTask(
        realm_id=realm_id,
        id=new_entity_id(),
        name=entity_cleanup_task_name(eid),
        properties=properties,
        internal_properties=internal,
        create_timestamp=create_timestamp,
    )


def drop_table_task(table: Table, **kwargs: Any) -> NewTask:
    """``drop_task`` for a pyiceberg table (see ``drop_task`` for the keywords)."""
    return drop_task(DropSpec.of_table(table), **kwargs)


def task_row(task: NewTask) -> TaskRow:
    """The row a metastore would hold for ``task`` right after inserting it."""
    return inserted(task, dict(task.properties), int(time.time() * 1000))


# The tableId every hand-written payload in these builders names.
TABLE_ID = {"namespace": ["ns"], "name": "t"}


def batch_task(
    realm: str,
    files: list[str] | None = None,
    *,
    name: str | None = None,
    extra: dict[str, str] | None = None,
    internal: dict[str, str] | None = None,
    create_timestamp: int | None = None,
) -> NewTask:
    """A BATCH_FILE_CLEANUP task as Polaris writes it."""
    task_id = new_entity_id()
    data = json.dumps(
        {
            "tableId": TABLE_ID,
            "batchFiles": files or [],
            "type": "TABLE_METADATA",
        }
    )
    props = {Prop.TASK_TYPE: "3", Prop.DATA: data, **(extra or {})}
    return NewTask(
        realm_id=realm,
        id=task_id,
        name=name or f"entityCleanup_1_batch_{task_id}",
        properties=props,
        internal_properties=internal or {"storageLocation": "file:///nowhere/ns/t"},
        create_timestamp=create_timestamp,
    )


def dropped_entity_json(**overrides: Any) -> str:
    """The ``data`` of an ENTITY_CLEANUP_SCHEDULER task, written out by hand in Jackson's
    bean names (not through our encoder), with any field overridden: hostile inputs too.
    """
    doc: dict[str, Any] = {
        "catalogId": 1,
        "id": 42,
        "parentId": 2,
        "typeCode": 7,
        "subTypeCode": 2,
        "name": "t",
        "entityVersion": 1,
        "createTimestamp": 0,
        "dropTimestamp": 0,
        "purgeTimestamp": 0,
        "toPurgeTimestamp": 0,
        "lastUpdateTimestamp": 0,
        "grantRecordsVersion": 1,
        "properties": "{}",
        "internalProperties": json.dumps({"metadata-location": "file:///wh/ns/t/metadata/v1.json"}),
    }
    doc.update(overrides)
    return json.dumps(doc)


def manifest_task_data(raw: bytes | str) -> str:
    """A MANIFEST_FILE_CLEANUP ``data`` carrying ``raw`` (bytes are base64-encoded, as
    Polaris does; a str goes in as given, so hostile encodings can be written)."""
    data = raw if isinstance(raw, str) else base64.b64encode(raw).decode()
    return json.dumps({"tableId": TABLE_ID, "manifestFileData": data})


def insert_row(store: Metastore, row: dict[str, Any]) -> None:
    """Insert one ``entities`` row exactly as given, for hostile rows and live entities,
    as the database's admin (Polaris's role, not the pipeline's)."""
    with admin_connection(store) as conn:
        conn.execute(queries.INSERT_TASKS.build(store.dialect), [row])
