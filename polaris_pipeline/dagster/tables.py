"""The table a task cleans up, as its runs and the catalog name it.

The table itself is the engine's (``tasks.ref.TableRef``), decoded once with its
task (``tasks.decoded.DecodedTask.table``): ``namespace.table`` from the dropped
entity, or a child's ``tableId`` (also when the rest of a child's payload does not
decode), its catalog, and the location the catalog recorded, in one spelling.
Here: how Dagster keys it.
"""

from __future__ import annotations

from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.ref import TableRef

__all__ = ["ASSET_KEY_PREFIX", "TABLE_REF_KEY", "TableRef", "key_parts", "table_of"]

# The first part of every table's asset key (the translator's default).
ASSET_KEY_PREFIX = ("polaris",)
UNKNOWN_CATALOG = "catalog_unknown"
# The step metadata entry holding a run's table as structured data (``TableRef.to_json``):
# the run report reads it back whole, where a tag is cut to 255 characters and an
# identifier joined with dots cannot be split back when a level holds a dot.
TABLE_REF_KEY = "table identity"


def safe_key_part(text: str) -> str:
    """``text`` as one asset key part (Dagster's UI links keys by parts): characters outside
    ``[A-Za-z0-9_-]`` become ``_``; the exact name stays in the event's metadata.
    """
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in text) or "_"


def key_parts(ref: TableRef) -> list[str]:
    """``[realm, "catalog_<id>", *namespace, table]``, each part made safe."""
    catalog = f"catalog_{ref.catalog_id}" if ref.catalog_id is not None else UNKNOWN_CATALOG
    return [safe_key_part(p) for p in (ref.realm, catalog, *ref.namespace, ref.name)]


def table_of(task: TaskRow | DecodedTask) -> TableRef | None:
    """The table ``task`` cleans up; None when no part of its payload names one (or a view's)."""
    return DecodedTask.of(task).table
