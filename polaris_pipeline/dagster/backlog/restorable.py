"""The ``held_tables_restorable`` check: a held table whose files went missing.

A hold protects only what Polaris itself cannot delete (``docs/operator-guide.md``):
when a held table's files are missing, something (Polaris's own in-process purge, most
likely) still deletes on that storage, and the check fails saying so. Read-only;
manifests are read once per process (a cache by path: a manifest never changes).
"""

from __future__ import annotations

from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, MetadataValue

from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.held import STILL_DELETING, HeldTable, check_held_tables
from polaris_pipeline.restore.restorable import ManifestCache
from polaris_pipeline.storage.resolve import StorageResolver

RESTORABLE_CHECK = "held_tables_restorable"
_CACHE = ManifestCache()


def _entry(held: HeldTable) -> dict[str, Any]:
    return {
        "task": f"{held.task.realm_id}/{held.task.id}",
        "table": held.table,
        "result": held.summary(),
    }


def evaluate_restorable_check(
    store: Metastore, resolver: StorageResolver, sample_size: int
) -> AssetCheckResult:
    """Fails (ERROR) when a held table has files missing; lists those and the bytes held."""
    checked = check_held_tables(store, resolver, _CACHE)
    lost = [h for h in checked if h.lost]
    unknown = [h for h in checked if h.result is None or h.result.incomplete]
    held_bytes = sum(h.result.bytes or 0 for h in checked if h.result is not None)
    meta: dict[str, Any] = {
        "held tables checked": MetadataValue.int(len(checked)),
        "not restorable": MetadataValue.int(len(lost)),
        "not known yet": MetadataValue.int(len(unknown)),
        "bytes held": MetadataValue.int(held_bytes),
    }
    if lost:
        meta["sample"] = MetadataValue.json([_entry(h) for h in lost[:sample_size]])
        return AssetCheckResult(
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            metadata=meta,
            description=f"{len(lost)} held table(s) no longer restorable: {STILL_DELETING}",
        )
    if unknown:
        meta["sample"] = MetadataValue.json([_entry(h) for h in unknown[:sample_size]])
    return AssetCheckResult(passed=True, metadata=meta)
