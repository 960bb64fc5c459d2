"""Auto-reclaim: the report's roots that are reclaimed without an operator's word.

Off unless catalogs are named (``LeakSettings.auto_reclaim_catalogs``): a
scheduled report then reclaims every root it found in those catalogs whose
newest object is older than the minimum age, each through ``reclaim_root``
(judged again, only old objects, its metadata last). A root with a newer object
is left for a later report: something may still write there.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from polaris_pipeline.leaks.model import LeakedRoot, LeakReport
from polaris_pipeline.leaks.reclaim import ReclaimReport, reclaim_root
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.resolve import StorageResolver


def due_roots(
    report: LeakReport, catalogs: Collection[str], *, min_age_ms: int, now_ms: int
) -> list[LeakedRoot]:
    """The roots of ``report`` under catalogs named in ``catalogs`` (any realm) whose
    newest object is at least ``min_age_ms`` old, in report order."""
    cutoff = now_ms - min_age_ms
    return [
        root
        for leaks in report.catalogs
        if leaks.catalog.name in catalogs
        for root in leaks.roots
        if root.newest_ms is not None and root.newest_ms <= cutoff
    ]


def auto_reclaim(
    store: Metastore,
    resolver: StorageResolver,
    report: LeakReport,
    catalogs: Collection[str],
    *,
    min_age_ms: int,
    now_ms: int | None = None,
    deletion_record: str | None = None,
    run_id: str | None = None,
) -> list[ReclaimReport]:
    """Reclaim :func:`due_roots`, one ``reclaim_root`` each; nothing when ``catalogs`` is
    empty. Raises ValueError for a minimum age below a day."""
    if not catalogs:
        return []
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    return [
        reclaim_root(
            store,
            resolver,
            root.uri,
            min_age_ms=min_age_ms,
            now_ms=now,
            deletion_record=deletion_record,
            run_id=run_id,
        )
        for root in due_roots(report, catalogs, min_age_ms=min_age_ms, now_ms=now)
    ]
