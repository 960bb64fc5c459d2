"""Cleanup tasks Polaris writes but never runs, shaped exactly as Polaris writes them."""

from __future__ import annotations

from builders.tasks import batch_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import NewTask, Prop
from polaris_pipeline.tasks.payloads import (
    DroppedEntity,
    encode_dropped_entity,
    entity_cleanup_task_name,
)

# Polaris's entity type codes of the drops that write a cleanup task it never runs.
ENTITY_TYPES = {
    2: "PRINCIPAL",
    3: "PRINCIPAL_ROLE",
    4: "CATALOG",
    5: "CATALOG_ROLE",
    6: "NAMESPACE",
}


def polaris_cleanup_task(realm: str, type_code: int, *, entity_id: int) -> NewTask:
    """The ENTITY_CLEANUP_SCHEDULER row Polaris writes on dropping an entity of ``type_code``."""
    top_level = type_code in (2, 3, 4)  # principals, principal roles, catalogs live at the root
    entity = DroppedEntity(
        id=entity_id,
        name=f"{ENTITY_TYPES[type_code].lower()}_{entity_id}",
        type_code=type_code,
        sub_type_code=0,
        catalog_id=0 if top_level else 100,
        parent_id=0 if top_level else 100,
        entity_version=2,
        create_timestamp=1_700_000_000_000,
        drop_timestamp=1_700_000_500_000,
        last_update_timestamp=1_700_000_500_000,
        properties={"owner": "ops"} if type_code != 6 else {"location": "s3://b/wh/ns"},
        internal_properties={"client_id": "abc"} if type_code == 2 else {},
        grant_records_version=1,
    )
    return NewTask(
        realm_id=realm,
        id=entity_id + 10_000,
        name=entity_cleanup_task_name(entity_id),
        properties={Prop.TASK_TYPE: "1", Prop.DATA: encode_dropped_entity(entity)},
        internal_properties={},
        create_timestamp=1_700_000_500_000,
    )


def seed_unhandled(store: Metastore, realm: str = "POLARIS") -> tuple[list[NewTask], NewTask]:
    """One unhandled task per entity type, and one ordinary batch task, in ``realm``."""
    unhandled = [
        polaris_cleanup_task(realm, code, entity_id=1000 + code) for code in sorted(ENTITY_TYPES)
    ]
    normal = batch_task(realm, ["file:///nowhere/ns/t/metadata/old.json"])
    store.insert_tasks([*unhandled, normal])
    return unhandled, normal
