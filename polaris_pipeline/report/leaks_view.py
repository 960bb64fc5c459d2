"""The leak report as shown: its JSON document and the text of each catalog.

One source for both surfaces of ``polaris-pipeline leaks`` (and the Dagster
asset's metadata reads the same numbers from the report itself).
"""

from __future__ import annotations

from typing import Any

from polaris_pipeline.leaks.model import CatalogLeaks, LeakedRoot, LeakReport
from polaris_pipeline.leaks.reclaim import DAY_MS, ReclaimReport, min_age_days
from polaris_pipeline.tasks.formatting import (
    add_json_times,
    format_bytes,
    iso_utc_seconds,
    json_id,
    retention_text,
)


def root_json(root: LeakedRoot) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "root": root.uri,
        "kind": root.kind,
        "objects": root.objects,
        "bytes": root.bytes,
        "metadata_file": root.metadata_file,
        "uuid": root.uuid,
        "gc_enabled": root.gc_enabled,
        "dropped_by": root.dropped_by,
        "error": root.error,
        "partial": root.partial,
    }
    add_json_times(
        doc,
        newest_object=root.newest_ms,
        oldest_object=root.oldest_ms,
        last_updated=root.last_updated_ms,
        dropped_at=root.dropped_at_ms,
    )
    return doc


def catalog_json(leaks: CatalogLeaks) -> dict[str, Any]:
    cat = leaks.catalog
    doc: dict[str, Any] = {
        "realm": cat.realm_id,
        "catalog": cat.name,
        "catalog_id": json_id(cat.catalog_id),
        "locations": list(cat.locations),
        "skipped": leaks.skipped,
        "partial": leaks.partial,
        "errors": leaks.errors,
        "roots": [root_json(r) for r in leaks.roots],
        "leaked_bytes": leaks.leaked_bytes,
        "not_a_table": [
            {"directory": n.uri, "objects": n.objects, "bytes": n.bytes} for n in leaks.not_tables
        ],
        "not_a_table_total": leaks.not_tables_total,
        "owned_roots": leaks.owned_roots,
        "pending_task_roots": leaks.pending_roots,
        "live_tables_pruned": leaks.live_tables_pruned,
        "directories_listed": leaks.directories_listed,
        "walked_by_an_earlier_catalog": leaks.walked_before,
    }
    add_json_times(doc, oldest_leak=leaks.oldest_ms)
    return doc


def report_json(report: LeakReport) -> dict[str, Any]:
    return {
        "catalogs": [catalog_json(c) for c in report.catalogs],
        "roots": report.roots,
        "leaked_bytes": report.leaked_bytes,
        "partial": report.partial,
    }


def root_cells(root: LeakedRoot) -> list[str]:
    """One row of the text table: root, kind, objects, size, newest, uuid, dropped, error."""
    dropped = ""
    if root.dropped_at_ms is not None:
        dropped = f"{iso_utc_seconds(root.dropped_at_ms)} by {root.dropped_by or '?'}"
    problem = root.error or ""
    if root.partial:
        problem = f"partial listing: {problem}"
    if root.gc_enabled is not None:
        problem = f"gc.enabled={root.gc_enabled!r} {problem}".strip()
    return [
        root.uri,
        root.kind,
        str(root.objects),
        format_bytes(root.bytes),
        iso_utc_seconds(root.newest_ms) or "",
        root.uuid or "",
        dropped,
        problem,
    ]


def catalog_heading(leaks: CatalogLeaks) -> str:
    cat = leaks.catalog
    head = f"catalog {cat.name!r} (realm {cat.realm_id})"
    if leaks.skipped:
        return f"{head}: skipped: {leaks.skipped}"
    parts = [
        f"{len(leaks.roots)} leaked root(s), {format_bytes(leaks.leaked_bytes)}",
        f"{leaks.owned_roots} owned by live entities",
        f"{leaks.pending_roots} named by tasks",
        f"{leaks.live_tables_pruned} live table(s) not listed",
    ]
    if leaks.partial:
        parts.append("PARTIAL: a listing failed")
    return f"{head}: " + ", ".join(parts)


def reclaim_json(report: ReclaimReport) -> dict[str, Any]:
    catalog = report.catalog
    return {
        "root": report.root,
        "realm": catalog.realm_id if catalog is not None else None,
        "catalog": catalog.name if catalog is not None else None,
        "min_age_days": min_age_days(report),
        "ok": report.ok,
        "refusal": report.refusal,
        "error": report.error,
        "deleted": report.deleted,
        "bytes_deleted": report.bytes_deleted,
        # Deleted where the store keeps deleted objects (versioning), or would not say.
        "retained": report.retained,
        "bytes_retained": report.bytes_retained,
        "retention_unknown": report.retention_unknown,
        "missing": report.missing,
        "kept_young": report.kept_young,
        "failures": report.failures,
        "failed": report.failed,
        "metadata_deleted": report.metadata_deleted,
        "directories_removed": report.directories_removed,
        "deletion_record": report.record,
    }


def reclaim_line(report: ReclaimReport) -> str:
    """One line: refused and why, or what was deleted and what stayed."""
    if report.refusal is not None and not report.deleted:
        return f"refused to reclaim {report.root}: {report.refusal}"
    parts = [f"deleted {report.deleted} object(s), {format_bytes(report.bytes_deleted)}"]
    kept = retention_text(report.retained, report.bytes_retained, report.retention_unknown)
    if kept:  # never read as bytes given back
        parts.append(kept)
    if report.kept_young:
        parts.append(
            f"kept {report.kept_young} younger than {report.min_age_ms / DAY_MS:g} day(s) "
            "(the metadata stays: the root is still reported)"
        )
    if report.failures:
        parts.append(f"{report.failures} failed (the metadata stays)")
    if report.refusal is not None:
        parts.append(f"stopped: {report.refusal}")
    if report.error is not None:
        parts.append(f"error: {report.error}")
    if report.record is not None:
        parts.append(f"recorded in {report.record}")
    return f"reclaim {report.root}: " + "; ".join(parts)
