"""A hold where it is real: storage on which Polaris's identity may not delete and ours may.

- S3 on moto with IAM enforced: Polaris's identity is a user whose policy allows S3 but
  denies ``s3:DeleteObject``; ours is the catalog's role, assumed.
- Azure on Azurite: Polaris's identity is a container SAS with every permission but
  delete (Azurite enforces SAS permissions; it has no RBAC roles); ours is the account key.

Polaris cannot delete (its own calls fail as denied); the restorable check, read-only,
passes as that identity while the drop is held; our sweep purges nothing while held and
the whole table once the hold has run its course. Polaris's own purge is not run here (its
executor needs its server): the delete calls it would make, signed by its identity, are
made directly.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import ContainerClient, ContainerSasPermissions, generate_container_sas
from botocore.exceptions import ClientError

from builders import tasks as built_tasks
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.held import check_held_tables
from polaris_pipeline.restore.restorable import check_restorable
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.config import StorageConfig, StorageRule
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import TaskPolicy
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, azurite  # noqa: F401
from tests.support.catalog_storage import (
    aws_storage_info,
    azure_location,
    azure_storage_info,
    azurite_table,
    iam_s3_table,
)
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
        return [o.status for o in sweep_tasks(runner)]


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


def _no_delete_sas(container: str) -> str:
    """A container SAS with every permission Polaris needs but delete."""
    return generate_container_sas(
        ACCOUNT,
        container,
        account_key=ACCOUNT_KEY,
        permission=ContainerSasPermissions(read=True, add=True, create=True, write=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def _sas_resolver(azurite: Azurite, container: str, sas: str) -> StorageResolver:  # noqa: F811
    """A static rule: the container read with ``sas`` alone (it beats the catalog's)."""
    connection = f"BlobEndpoint={azurite.blob_endpoint};SharedAccessSignature={sas}"
    options = {"account_name": ACCOUNT, "connection_string": connection}
    return StorageResolver(StorageConfig(rules=(StorageRule(azure_location(container), options),)))


@pytest.mark.slow  # two sweeps and Azurite's start
def test_on_azure_a_sas_without_delete_cannot_delete_and_the_account_purges_after_the_hold(
    azurite: Azurite,  # noqa: F811
    held_store: Metastore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Our identity: the account key, the Azure SDK's way.
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    container = azurite.new_container()
    table = azurite_table(azurite, tmp_path, container, "t")
    prefix = table.location().split(".core.windows.net/", 1)[1].rstrip("/") + "/"

    def objects() -> set[str]:
        return {n for n in azurite.names(container) if n.startswith(prefix)}

    files = objects()
    named = restorable_files(table)
    task = built_tasks.drop_table_task(
        table, extra_internal_properties={STORAGE_CONFIG_KEY: azure_storage_info(container)}
    )
    held_store.insert_tasks([task])

    # Polaris's delete, with its SAS: refused for want of the permission, nothing goes.
    sas = _no_delete_sas(container)
    polaris = ContainerClient.from_container_url(f"{azurite.blob_endpoint}/{container}?{sas}")
    with pytest.raises(HttpResponseError) as refused:
        polaris.delete_blob(sorted(files)[0])
    assert "AuthorizationPermissionMismatch" in str(refused.value)
    assert objects() == files

    # The restorable check reads with Polaris's SAS: it may, and the table is whole.
    as_polaris = _sas_resolver(azurite, container, sas)
    [held] = check_held_tables(held_store, as_polaris)
    assert held.summary() == "restorable", held.summary()
    assert held.result is not None and held.result.files == len(named)

    assert _sweep(held_store) == []
    assert objects() == files
    move_drop_back(held_store, REALM, task.id, 2 * DAY_MS)
    statuses = _sweep(held_store)
    assert statuses and set(statuses) == {Status.DONE}
    assert objects() == set()
    gone = check_restorable(as_polaris, table.metadata_location)
    assert gone.missing == (table.metadata_location,)
    held_store.dispose()
