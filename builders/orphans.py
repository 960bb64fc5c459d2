"""Orphaned task rows as a Polaris purge that died leaves them, for the benches and tests.

``orphaned_task`` is one row with its own ``storageLocation``; ``orphaned_children``
the MANIFEST and BATCH children of a purge whose parent row is gone.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from builders.manifests import write_with_pyiceberg
from polaris_pipeline.metastore import new_entity_id
from polaris_pipeline.tasks.model import NewTask, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    ManifestCleanupPayload,
    TableIdentifier,
    batch_cleanup_task_name,
    encode_batch_cleanup,
    encode_manifest_cleanup,
    manifest_cleanup_task_name,
    task_properties,
)


def orphaned_task(
    realm: str, name: str, task_type: TaskType, data: str, location: str, created: int
) -> NewTask:
    """An orphaned task as Polaris writes it, with its own ``storageLocation``."""
    return NewTask(
        realm_id=realm,
        id=new_entity_id(),
        name=name,
        properties=task_properties(task_type, data),
        internal_properties={"storageLocation": location},
        create_timestamp=created,
    )


def touch_files(directory: Path, n: int) -> list[str]:
    """``n`` small files under ``directory``; their ``file://`` URIs."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = directory / f"{i:05d}-{uuid.uuid4().hex[:6]}.parquet"
        path.write_bytes(b"PAR1")
        out.append(f"file://{path}")
    return out


def orphaned_batch(
    realm: str, location: Path, table: str, files: list[str], parent: str, created: int
) -> NewTask:
    """A BATCH child of ``ns.<table>`` over ``files``, named after ``parent``."""
    data = encode_batch_cleanup(BatchCleanupPayload(TableIdentifier(("ns",), table), tuple(files)))
    name = batch_cleanup_task_name(parent, files)
    return orphaned_task(
        realm, name, TaskType.BATCH_FILE_CLEANUP, data, f"file://{location}", created
    )


def orphaned_children(realm: str, root: Path, table: str, n: int, created: int) -> list[NewTask]:
    """What a Polaris purge of ``ns.<table>`` leaves when it dies after creating its
    children: ``n - 2`` manifest children (3 data files each) and 2 batch children
    (old metadata files), all named after a parent row that is gone."""
    location = root / "ns" / table
    parent = f"entityCleanup_{new_entity_id()}"
    tasks = []
    for i in range(max(0, n - 2)):
        files = touch_files(location / "data" / f"m{i}", 3)
        local = location / "metadata" / f"{uuid.uuid4()}-m{i}.avro"
        local.parent.mkdir(parents=True, exist_ok=True)
        written = write_with_pyiceberg(str(local), files)
        uri = f"file://{local}"
        payload = ManifestCleanupPayload(TableIdentifier(("ns",), table), written.ref(uri))
        name = manifest_cleanup_task_name(parent, uri)
        data = encode_manifest_cleanup(payload)
        tasks.append(
            orphaned_task(
                realm, name, TaskType.MANIFEST_FILE_CLEANUP, data, f"file://{location}", created
            )
        )
    for j in range(min(2, n)):
        old = touch_files(location / "metadata" / f"old{j}", 2)
        tasks.append(orphaned_batch(realm, location, table, old, parent, created))
    return tasks
