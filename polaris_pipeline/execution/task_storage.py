"""Where a task's storage configuration comes from: the task, else its catalog.

Polaris writes some cleanup tasks without ``storage_configuration_info`` and
``storageLocation`` (every view cleanup of 1.0-1.6; a table's when it found no
configuration at the drop): only the entity's ``catalogId`` and ``location``. Polaris never
runs them, and on a cloud store only the catalog's credentials reach their files.

For such an ENTITY_CLEANUP_SCHEDULER task the catalog row (type CATALOG, the entity's
``catalogId``, the task's realm) supplies its configuration, with the recorded roots
(``DecodedTask.roots``): all from the catalog's records, nothing from a file. A child
reaches the catalog through its parent row (``<parent>_<what>_<uuid>``): the parent's
configuration, else its entity's catalog's; a child's own ``storageLocation`` is then
judged against allowedLocations (``storage/scope.py``). Otherwise the task is left as
it is: the guard refuses it, or the static storage config reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.hold import catalog_id_of, parent_name_of
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.roots import STORAGE_LOCATION_KEY


@dataclass(frozen=True)
class TaskStorage:
    """What the resolver is given for one task, and what its children inherit."""

    # The source of the task's storage configuration and credential scope.
    properties: Mapping[str, str]
    # The catalog's ``storage_configuration_info`` when it was looked up (the task
    # carried none); table children are handed it, as Polaris's children carry it.
    from_catalog: str | None = None


def task_storage(task: TaskRow | DecodedTask, metastore: Metastore) -> TaskStorage:
    """The storage source of ``task``: its own internal properties, or its catalog's
    configuration with its recorded roots (see the module docstring)."""
    decoded = DecodedTask.of(task)
    row, entity = decoded.row, decoded.entity
    internal = row.internal_properties
    unchanged = TaskStorage(internal)
    if STORAGE_CONFIG_KEY in internal:
        return unchanged
    if entity is None:
        # A child reaches its catalog through its parent; anything else (not a
        # cleanup task, or one that did not decode): the handler records why it
        # cannot run.
        return _child_storage(row, metastore) or unchanged
    roots = decoded.roots
    if roots is None:
        return unchanged
    catalog = metastore.catalog_internal_properties(row.realm_id, entity.catalog_id)
    info = (catalog or {}).get(STORAGE_CONFIG_KEY)
    if info is None:
        return unchanged
    props = {**roots.properties, **internal, STORAGE_CONFIG_KEY: info}
    if not props.get(STORAGE_LOCATION_KEY, "").strip():
        props[STORAGE_LOCATION_KEY] = roots.location
    return TaskStorage(props, info)


def _child_storage(row: TaskRow, metastore: Metastore) -> TaskStorage | None:
    """A child's storage source: its own internal properties plus its parent's storage
    configuration (the parent's own, or its catalog's); None when it has none to take
    (no parent name, no location of its own, the parent gone or with none). The
    parent is read, never decoded: its catalogId as the hold rule reads it."""
    parent_name = parent_name_of(row)
    if parent_name is None or not row.internal_properties.get(STORAGE_LOCATION_KEY, "").strip():
        return None
    parent = metastore.task_named(row.realm_id, parent_name)
    if parent is None:
        return None
    info = parent.internal_properties.get(STORAGE_CONFIG_KEY)
    catalog_id = catalog_id_of(parent)
    if info is None and catalog_id is not None:
        catalog = metastore.catalog_internal_properties(row.realm_id, catalog_id)
        info = (catalog or {}).get(STORAGE_CONFIG_KEY)
    if info is None:
        return None
    return TaskStorage({**row.internal_properties, STORAGE_CONFIG_KEY: info}, info)
