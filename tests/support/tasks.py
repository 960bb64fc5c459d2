"""Building TASK rows for tests."""

from __future__ import annotations

import json
from typing import Any

from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.model import NewTask, Prop


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
            "tableId": {"namespace": ["ns"], "name": "t"},
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


def seed(store: Metastore, realm: str, n: int, **kwargs: Any) -> list[NewTask]:
    tasks = [batch_task(realm, **kwargs) for _ in range(n)]
    store.insert_tasks(tasks)
    return tasks


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
