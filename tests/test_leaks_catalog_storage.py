"""The leak report and a reclaim reach a catalog's locations with the catalog's own storage
configuration, as its tables' tasks do, unless the deployment has a rule for them.

S3 on moto with IAM enforced (``tests/support/s3.py``'s ``moto_iam``): the deployment's
identity, the sweeper user, may only assume roles, and the deployment's storage config
names neither moto's endpoint nor a role. The catalog's storage configuration names
both: role ``purger`` at moto. The walk, the report's totals and a reclaim all work
only through it.
"""

from __future__ import annotations

from pathlib import Path

from pyiceberg.table import Table

from builders.catalogs import catalog_entity
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.leaks.reclaim import DAY_MS, reclaim_root
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.config import StorageConfig, StorageRule
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import normalize_uri
from tests.support.catalog_storage import aws_storage_info, iam_s3_table
from tests.support.s3 import MotoIam
from tests.support.unreferenced import live_entity


def _keys_under(moto_iam: MotoIam, bucket: str, table: Table) -> set[str]:
    prefix = table.location().split(f"s3://{bucket}/", 1)[1] + "/"
    return {k for k in moto_iam.keys(bucket) if k.startswith(prefix)}


def _warehouse(
    moto_iam: MotoIam, store: Metastore, tmp_path: Path, role: str
) -> tuple[str, Table, Table]:
    """A bucket holding a live table and a dropped one, and a catalog assuming ``role``."""
    bucket = moto_iam.new_bucket()
    live = iam_s3_table(moto_iam, tmp_path, bucket, "live")
    live_entity(store, live.location(), name="live")
    dropped = iam_s3_table(moto_iam, tmp_path, bucket, "dropped")
    info = aws_storage_info(moto_iam, bucket, role)
    catalog_entity(store, "cat", f"s3://{bucket}/wh", storage_info=info)
    return bucket, live, dropped


def test_the_walk_and_a_reclaim_go_through_the_catalogs_role_and_endpoint(
    moto_iam: MotoIam, sweeper_identity: None, store: Metastore, tmp_path: Path
) -> None:
    bucket, live, dropped = _warehouse(moto_iam, store, tmp_path, "purger")
    dropped_keys = _keys_under(moto_iam, bucket, dropped)
    live_keys = _keys_under(moto_iam, bucket, live)
    resolver = StorageResolver()  # the deployment: no rule, the sweeper user's chain
    moto_iam.start_recording()

    report = metastore_leaks(store, resolver)

    [cat] = report.catalogs
    assert not report.partial, cat.errors
    [root] = cat.roots
    assert normalize_uri(root.uri) == normalize_uri(dropped.location())
    assert root.objects == len(dropped_keys) > 0 and root.kind == "table"
    assert cat.live_tables_pruned == 1
    # Signed with the session the catalog's role gave: the sweeper user can list nothing.
    assert moto_iam.session_credentials_seen()

    later = (root.newest_ms or 0) + 2 * DAY_MS
    result = reclaim_root(store, resolver, root.uri, min_age_ms=DAY_MS, now_ms=later)

    assert result.ok and result.metadata_deleted, (result.refusal, result.error, result.failed)
    assert result.deleted == len(dropped_keys)
    assert _keys_under(moto_iam, bucket, dropped) == set()
    assert _keys_under(moto_iam, bucket, live) == live_keys


def test_a_role_that_may_not_touch_the_bucket_makes_a_partial_report_not_a_silent_one(
    moto_iam: MotoIam, sweeper_identity: None, store: Metastore, tmp_path: Path
) -> None:
    _, _, dropped = _warehouse(moto_iam, store, tmp_path, "powerless")

    report = metastore_leaks(store, StorageResolver())

    [cat] = report.catalogs
    assert report.partial and cat.roots == [] and cat.errors
    result = reclaim_root(store, StorageResolver(), dropped.location(), min_age_ms=DAY_MS)
    assert not result.ok and result.deleted == 0


def test_the_deployments_own_rule_for_the_location_wins_over_the_catalogs(
    moto_iam: MotoIam, sweeper_identity: None, store: Metastore, tmp_path: Path
) -> None:
    # The catalog's role may not be assumed; the deployment's rule reaches the bucket.
    bucket, _, dropped = _warehouse(moto_iam, store, tmp_path, "forbidden")
    admin = {
        "endpoint_url": moto_iam.endpoint_url,
        "key": moto_iam.admin.key,
        "secret": moto_iam.admin.secret,
        "client_kwargs": {"region_name": moto_iam.region},
    }
    resolver = StorageResolver(StorageConfig(rules=(StorageRule(f"s3://{bucket}", admin),)))
    moto_iam.start_recording()

    report = metastore_leaks(store, resolver)

    [cat] = report.catalogs
    assert not report.partial, cat.errors
    assert [normalize_uri(r.uri) for r in cat.roots] == [normalize_uri(dropped.location())]
    assert moto_iam.session_credentials_seen() == {}  # no role was assumed
