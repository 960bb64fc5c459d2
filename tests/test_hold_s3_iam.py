"""A hold where it is real: S3 on moto with IAM enforced, Polaris's storage identity denied
``s3:DeleteObject`` (a user whose policy allows S3 but denies deleting). Polaris cannot
delete (its own S3 calls fail AccessDenied); the restorable check, read-only, passes as
that identity while the drop is held; our identity (the catalog's role, assumed) purges
nothing while held and the whole table once the hold has run its course.

Polaris's own purge is not run here (its executor needs its server): the calls it would
make (S3 DeleteObject and DeleteObjects, signed by its identity) are made directly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from builders import tasks as built_tasks
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.held import check_held_tables
from polaris_pipeline.restore.restorable import check_restorable
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import TaskPolicy
from tests.support.catalog_storage import aws_storage_info, iam_s3_table
from tests.support.s3 import MotoIam
from tests.support.table_metadata import restorable_files
from tests.support.tasks import move_drop_back

DAY_MS = 86_400_000
REALM = "POLARIS"


@pytest.fixture
def held_store(tmp_path: Path) -> Metastore:
    """A SQLite metastore whose realm holds every drop for a day."""
    store = Metastore(
        f"sqlite:///{tmp_path}/held.db",
        policy=TaskPolicy(lease_timeout_ms=60_000, grace_ms=0, hold_ms=DAY_MS),
    )
    store.init_schema()
    return store


def _keys_under(moto_iam: MotoIam, bucket: str, location: str) -> set[str]:
    prefix = location.split(f"s3://{bucket}/", 1)[1].rstrip("/") + "/"
    return {k for k in moto_iam.keys(bucket) if k.startswith(prefix)}


def _sweep(store: Metastore) -> list[Status]:
    # No storage config: our identity is the catalog's role, assumed by the sweeper's
    # base user from the environment (sweeper_identity).
    with Runner(store, resolver=StorageResolver()) as runner:
        return [o.status for o in runner.sweep()]


@pytest.mark.slow  # 12 s: a purge through assumed-role sessions, two sweeps
@pytest.mark.usefixtures("sweeper_identity")
def test_polaris_cannot_delete_the_held_table_which_stays_restorable_until_we_purge(
    moto_iam: MotoIam, held_store: Metastore, tmp_path: Path
) -> None:
    bucket = moto_iam.new_bucket()
    table = iam_s3_table(moto_iam, tmp_path, bucket, "t")
    files = _keys_under(moto_iam, bucket, table.location())
    named = restorable_files(table)
    catalog_storage = aws_storage_info(moto_iam, bucket, "purger")
    task = built_tasks.drop_table_task(
        table, extra_internal_properties={STORAGE_CONFIG_KEY: catalog_storage}
    )
    held_store.insert_tasks([task])

    # Polaris's purge, as its identity: each delete is refused, nothing goes.
    polaris = moto_iam.client(user=moto_iam.polaris)
    victim = sorted(files)[0]
    with pytest.raises(ClientError) as refused:
        polaris.delete_object(Bucket=bucket, Key=victim)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    batch = polaris.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in sorted(files)]}
    )
    assert not batch.get("Deleted")
    assert {e["Code"] for e in batch["Errors"]} == {"AccessDenied"}
    assert _keys_under(moto_iam, bucket, table.location()) == files

    # The restorable check reads as Polaris's identity: it may, and the table is whole.
    as_polaris = StorageResolver(moto_iam.storage_config(bucket, moto_iam.polaris))
    [held] = check_held_tables(held_store, as_polaris)
    assert held.summary() == "restorable", held.summary()
    assert held.result is not None and held.result.files == len(named)

    # Held: our sweep leases nothing and deletes nothing.
    assert _sweep(held_store) == []
    assert _keys_under(moto_iam, bucket, table.location()) == files

    # The hold runs its course: our identity purges the whole table.
    move_drop_back(held_store, REALM, task.id, 2 * DAY_MS)
    statuses = _sweep(held_store)
    assert statuses and set(statuses) == {Status.DONE}
    assert held_store.list_tasks() == []
    assert _keys_under(moto_iam, bucket, table.location()) == set()
    # Purged: as Polaris's identity the check now finds every file missing.
    gone = check_restorable(as_polaris, table.metadata_location)
    assert gone.missing == (table.metadata_location,)
    held_store.dispose()
