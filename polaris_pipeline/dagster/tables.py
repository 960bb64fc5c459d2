"""The table a task cleans up, as its runs and the catalog name it.

``table_of(task)`` decodes it from the payload: ``namespace.table`` from the
dropped entity, or a child's ``tableId``, and its catalog (through
``tasks.summary.summarize``, the CLI's own decoder); its location is the one the
catalog recorded (``cleanup.roots.recorded_roots``, the guard's), in one spelling.
A payload decoded only in part still names its table when the part that does is
the ``tableId`` (a manifest cleanup whose manifest bytes are corrupt): a run is
tagged with every part of its task that decodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dagster import AssetKey

from polaris_pipeline.cleanup.roots import recorded_roots
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.storage.uri import normalize_uri
from polaris_pipeline.tasks import payloads
from polaris_pipeline.tasks.model import TaskRow, TaskType
from polaris_pipeline.tasks.payloads import table_identifier
from polaris_pipeline.tasks.summary import summarize

# The first part of every table's asset key (the translator's default).
ASSET_KEY_PREFIX = ("polaris",)
UNKNOWN_CATALOG = "catalog_unknown"
# The step metadata entry holding a run's table as structured data (``TableRef.to_json``):
# the run report reads it back whole, where a tag is cut to 255 characters and an
# identifier joined with dots cannot be split back when a level holds a dot.
TABLE_REF_KEY = "table identity"
_CHILD_TYPES = (TaskType.MANIFEST_FILE_CLEANUP, TaskType.BATCH_FILE_CLEANUP)


def safe_key_part(text: str) -> str:
    """``text`` as one asset key part: characters outside ``[A-Za-z0-9_-]`` become ``_``.

    Dagster's UI links asset keys by their parts (the exact name stays in the
    event's metadata).
    """
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in text) or "_"


@dataclass(frozen=True)
class TableRef:
    """A dropped table, as a run and the catalog name it."""

    realm: str
    namespace: tuple[str, ...]
    name: str
    catalog_id: int | None = None
    # The table's base location as the catalog recorded it (normalized), if it did.
    location: str | None = None

    @property
    def label(self) -> str:
        """``namespace.table``: Iceberg's own way of writing an identifier."""
        return str(payloads.TableIdentifier(self.namespace, self.name))

    @property
    def key_parts(self) -> list[str]:
        """``[realm, "catalog_<id>", *namespace, table]``, each part made safe."""
        catalog = f"catalog_{self.catalog_id}" if self.catalog_id is not None else UNKNOWN_CATALOG
        return [safe_key_part(p) for p in (self.realm, catalog, *self.namespace, self.name)]

    @property
    def asset_key(self) -> AssetKey:
        """The default translator's key: ``["polaris", *key_parts]``."""
        return AssetKey([*ASSET_KEY_PREFIX, *self.key_parts])

    def to_json(self) -> dict[str, Any]:
        return {
            "realm": self.realm,
            "namespace": list(self.namespace),
            "name": self.name,
            "catalog_id": self.catalog_id,
            "location": self.location,
        }

    @classmethod
    def from_json(cls, value: object) -> TableRef | None:
        """The ref ``to_json`` wrote; None for anything else (a step of an older
        release, or metadata a user's code wrote under the same name)."""
        if not isinstance(value, Mapping):
            return None
        realm, namespace, name = value.get("realm"), value.get("namespace"), value.get("name")
        catalog_id, location = value.get("catalog_id"), value.get("location")
        if not (isinstance(realm, str) and realm and isinstance(name, str) and name):
            return None
        if not isinstance(namespace, list) or not all(isinstance(p, str) for p in namespace):
            return None
        if catalog_id is not None and (
            isinstance(catalog_id, bool) or not isinstance(catalog_id, int)
        ):
            return None
        if location is not None and not isinstance(location, str):
            return None
        return cls(realm, tuple(namespace), name, catalog_id, location or None)


def _identifier(
    task: TaskRow,
) -> tuple[payloads.TableIdentifier, int | None, payloads.DroppedEntity | None]:
    """The table's identifier, catalog id and dropped entity (a table cleanup's), or
    PolarisPipelineError."""
    kind = task.task_type()
    data = task.data()
    if kind is TaskType.ENTITY_CLEANUP_SCHEDULER:
        entity = payloads.decode_dropped_entity(data)
        return table_identifier(entity), entity.catalog_id or None, entity
    if kind is TaskType.MANIFEST_FILE_CLEANUP:
        return payloads.decode_manifest_cleanup(data).table_id, None, None
    return payloads.decode_batch_cleanup(data).table_id, None, None


def _partial_identifier(task: TaskRow) -> payloads.TableIdentifier | None:
    """A child's ``tableId`` when the rest of its payload does not decode."""
    try:
        if task.task_type() not in _CHILD_TYPES:
            return None
        return payloads.decode_child_table_id(task.data())
    except PolarisPipelineError:
        return None


def table_of(task: TaskRow) -> TableRef | None:
    """The table ``task`` cleans up; None when no part of its payload names one (or a view's)."""
    summary = summarize(task)
    if summary.is_view:
        return None
    identifier: payloads.TableIdentifier | None = None
    catalog_id: int | None = None
    entity: payloads.DroppedEntity | None = None
    if summary.problem is None and summary.table is not None:
        try:
            identifier, catalog_id, entity = _identifier(task)
        except PolarisPipelineError:
            identifier = None
    if identifier is None:
        identifier = _partial_identifier(task)
        if identifier is None:
            return None
    roots = recorded_roots(task, entity)
    return TableRef(
        realm=task.realm_id,
        namespace=identifier.namespace,
        name=identifier.name,
        catalog_id=catalog_id,
        location=normalize_uri(roots.location) if roots else None,
    )
