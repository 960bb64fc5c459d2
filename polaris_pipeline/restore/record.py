"""The restore record: one JSON file beside the deletion records saying a purge ended
because its table came back, by ``tasks restore`` or found live by the guard.

``<prefix>/<realm>/<task id>/restore-<timestamp>.json``; what each writer knows goes in
beside the common fields (``record``, ``at``, the task).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from polaris_pipeline.storage.deletion_record import safe_name
from polaris_pipeline.tasks.formatting import json_id
from polaris_pipeline.tasks.model import TaskRow

if TYPE_CHECKING:
    from polaris_pipeline.storage.resolve import StorageResolver


def write_restore_record(
    resolver: StorageResolver, prefix: str, task: TaskRow, fields: Mapping[str, Any]
) -> str:
    """Write the record of ``task``'s restore under ``prefix``; its URI."""
    now = datetime.now(UTC)
    uri = (
        f"{prefix.rstrip('/')}/{safe_name(task.realm_id)}/{task.id}/"
        f"restore-{now.strftime('%Y%m%dT%H%M%S%fZ')}.json"
    )
    doc = {
        "record": "restore",
        "at": now.isoformat().replace("+00:00", "Z"),
        "realm": task.realm_id,
        "task_id": json_id(task.id),
        "task_name": task.name,
        **fields,
    }
    fs, path = resolver.filesystem(uri)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with fs.open(path, "w") as out:
        out.write(json.dumps(doc) + "\n")
    return uri
