"""Catalog storage mode on Azure: a pyiceberg table on Azurite, dropped as Polaris
drops it (storage_configuration_info of type AzureStorageConfigurationInfo), purged
through adlfs with a SAS the sweeper makes from its configured account key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError
from pyiceberg.table import Table

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.errors import StorageError
from polaris_pipeline.execution.runner import Status
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.totals import OutcomeTotals
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.credentials.azure import (
    AzureCredentials,
    configured_key,
    parse_location,
)
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import Prop, TaskRow
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, azurite  # noqa: F401
from tests.support.catalog_storage import (
    azure_location,
    azure_storage_info,
    azurite_table,
    catalog_sweep,
    guard_reasons,
    polaris_catalog,
    pre_1_7_view_task,
    sweep_batch_error,
)
from tests.support.iceberg import view_metadata


def _wasb(container: str, path: str = "wh", scheme: str = "wasbs") -> str:
    return f"{scheme}://{container}@{ACCOUNT}.blob.core.windows.net/{path}"


@pytest.fixture
def sweeper_key(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The sweeper's configured key, the Azure SDK's way."""
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)


def _prefix(table: Table) -> str:
    return parse_location(table.location()).path + "/"


def test_location_parsing_hostile_inputs() -> None:
    loc = parse_location("abfss://c@acct.dfs.core.windows.net/wh/t/")
    assert (loc.container, loc.account, loc.path) == ("c", "acct", "wh/t")
    assert loc.blob_endpoint == "https://acct.blob.core.windows.net"
    for bad in (
        "abfs://acct.dfs.core.windows.net/wh",  # no container
        "abfs://@acct.dfs.core.windows.net/wh",
        "abfs://c@acct.queue.core.windows.net/wh",  # not a blob or dfs host
        "s3://c@acct.dfs.core.windows.net/wh",
    ):
        with pytest.raises(StorageError):
            parse_location(bad)


def test_configured_key_must_name_the_locations_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", f"AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY}"
    )
    assert configured_key(ACCOUNT) is not None
    assert configured_key("otheraccount") is None
    assert configured_key(ACCOUNT[:-1]) is None  # a prefix of the name is another account


def test_table_purged_through_a_sas_and_the_neighbour_kept(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
    store: Metastore,
    tmp_path: Path,
) -> None:
    container = azurite.new_container()
    table = azurite_table(azurite, tmp_path, container, "t")
    files = {n for n in azurite.names(container) if n.startswith(_prefix(table))}
    assert files
    # Same container, a name that starts with the table's: must survive.
    neighbour = _prefix(table).rstrip("/") + "2/data/keep.parquet"
    azurite.put(container, neighbour, b"keep")
    task = built_tasks.drop_table_task(
        table, extra_internal_properties={STORAGE_CONFIG_KEY: azure_storage_info(container)}
    )
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert store.get_task("POLARIS", task.id) is None
    remaining = azurite.names(container)
    assert not {n for n in remaining if n.startswith(_prefix(table))}
    assert neighbour in remaining
    # A container SAS cannot read the account's blob service properties (soft delete):
    # the deletes are reported as kept-or-freed unknown, never as freed.
    totals = OutcomeTotals.of(outcomes)
    assert totals.files_deleted and totals.retention_unknown == totals.files_deleted
    assert "bytes kept or freed: unknown" in totals.line()


def test_the_vended_sas_reaches_only_its_container(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
) -> None:
    mine, other = azurite.new_container(), azurite.new_container()
    azurite.put(other, "wh/t/secret.parquet", b"x")
    azurite.put(mine, "wh/t/data/a.parquet", b"a")
    task = _task(azure_location(mine, "wh/t"), azure_storage_info(mine))
    resolver = StorageResolver(azure=AzureCredentials()).for_task(task)
    assert resolver.exists(azure_location(mine, "wh/t/data/a.parquet"))
    fs, _ = resolver.filesystem(azure_location(mine, "wh/t/data/a.parquet"))
    # The SAS (not a key) is what the filesystem holds, and it is container-scoped.
    with pytest.raises(HttpResponseError, match="failed to authenticate"):
        fs.info(f"{other}/wh/t/secret.parquet")
    with pytest.raises(StorageError, match="outside the locations"):
        resolver.filesystem(azure_location(mine, "elsewhere/x"))
    assert ACCOUNT_KEY not in resolver.redact(str(fs.storage_options))
    sas = fs.storage_options["connection_string"].split("SharedAccessSignature=", 1)[1]
    assert "sig=" in sas and sas not in resolver.redact(f"error with {sas}")


def test_guard_refuses_on_azure_what_it_refuses_on_s3(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
    store: Metastore,
) -> None:
    container = azurite.new_container()
    root = azure_location(container, "wh/ns/t")
    inside = azure_location(container, "wh/ns/t/data/a.parquet")
    sibling = azure_location(container, "wh/ns/t2/data/b.parquet")
    other = f"abfs://other@{ACCOUNT}.dfs.core.windows.net/wh/ns/t/data/c.parquet"
    dotdot = azure_location(container, "wh/ns/t/../t2/data/b.parquet")
    for uri in (inside, sibling):
        azurite.put(container, parse_location(uri).path, b"x")
    reasons = guard_reasons(root, inside, sibling, other, dotdot)
    assert "other host" in reasons[other]
    # End to end: a batch task naming all of them deletes only the admitted file and
    # records why it refused the others.
    error = sweep_batch_error(store, root, [inside, sibling, dotdot], azure_storage_info(container))
    assert "guard refused 2 path(s)" in error
    assert azurite.names(container) == {"wh/ns/t2/data/b.parquet"}


def _task(storage_location: str, storage_info: str) -> TaskRow:
    internal = {"storageLocation": storage_location, STORAGE_CONFIG_KEY: storage_info}
    return built_tasks.task_row(batch_task("POLARIS", [], internal=internal))


@pytest.mark.parametrize("scheme", ["wasb", "wasbs"])
def test_wasb_files_purged_through_the_blob_endpoint_and_the_neighbour_kept(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
    store: Metastore,
    scheme: str,
) -> None:
    container = azurite.new_container()
    files = [
        _wasb(container, "wh/ns/t/data/a.parquet", scheme),
        _wasb(container, "wh/ns/t/metadata/snap-1.avro", scheme),
    ]
    neighbour = "wh/ns/t2/data/keep.parquet"  # same container, the table's name as a prefix
    for name in [*(parse_location(f).path for f in files), neighbour]:
        azurite.put(container, name, b"x")
    task = batch_task(
        "POLARIS",
        files,
        internal={
            "storageLocation": _wasb(container, "wh/ns/t", scheme),
            STORAGE_CONFIG_KEY: azure_storage_info(container, _wasb(container, "wh", scheme)),
        },
    )
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    assert [o.status for o in outcomes] == [Status.DONE], [o.error for o in outcomes]
    assert store.get_task("POLARIS", task.id) is None
    assert azurite.names(container) == {neighbour}


def test_wasb_gets_the_same_container_sas_and_guard(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
    store: Metastore,
) -> None:
    mine, other = azurite.new_container(), azurite.new_container()
    azurite.put(other, "wh/ns/t/secret.parquet", b"x")
    root = _wasb(mine, "wh/ns/t")
    inside, sibling = _wasb(mine, "wh/ns/t/data/a.parquet"), _wasb(mine, "wh/ns/t2/data/b.parquet")
    dotdot = _wasb(mine, "wh/ns/t/../t2/data/b.parquet")
    for uri in (inside, sibling):
        azurite.put(mine, parse_location(uri).path, b"x")
    info = azure_storage_info(mine, _wasb(mine))
    resolver = StorageResolver().for_task(_task(root, info))
    fs, path = resolver.filesystem(inside)
    assert path == f"{mine}/wh/ns/t/data/a.parquet" and resolver.exists(inside)
    with pytest.raises(HttpResponseError, match="failed to authenticate"):
        fs.info(f"{other}/wh/ns/t/secret.parquet")
    assert "SharedAccessSignature=" in fs.storage_options["connection_string"]
    assert ACCOUNT_KEY not in str(fs.storage_options)
    # A location outside allowedLocations gets no credentials at all.
    with pytest.raises(StorageError, match="outside the catalog's allowedLocations"):
        StorageResolver().for_task(_task(_wasb(other, "wh/ns/t"), info))

    reasons = guard_reasons(root, inside, sibling, _wasb(other, "wh/ns/t/x.parquet"), dotdot)
    assert "other host" in reasons[_wasb(other, "wh/ns/t/x.parquet")]
    error = sweep_batch_error(store, root, [inside, sibling, dotdot], info)
    assert "guard refused 2 path(s)" in error
    assert azurite.names(mine) == {"wh/ns/t2/data/b.parquet"}
    assert azurite.names(other) == {"wh/ns/t/secret.parquet"}


# -- a view task of Polaris 1.0-1.6: no storage configuration, its catalog's looked up --


@pytest.mark.parametrize("allowed", ["wh", "elsewhere"])
def test_a_pre_1_7_view_task_is_reached_through_its_catalogs_storage_configuration(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
    store: Metastore,
    allowed: str,
) -> None:
    container = azurite.new_container()
    location = azure_location(container, "wh/ns/v")
    names = []
    for _ in range(2):
        uri, body = view_metadata(location)
        azurite.put(container, parse_location(uri).path, body)
        names.append(parse_location(uri).path)
    older, current = names
    polaris_catalog(store, azure_storage_info(container, azure_location(container, allowed)))
    task = pre_1_7_view_task(azure_location(container, current), location)
    store.insert_tasks([task])

    outcomes = catalog_sweep(store)

    if allowed == "wh":
        assert [o.status for o in outcomes] == [Status.DONE], [o.error for o in outcomes]
        assert azurite.names(container) == {older}  # only the current file, as 1.7 does
    else:
        # The catalog's allowedLocations bound the view, as they bound Polaris's tasks.
        row = store.get_task("POLARIS", task.id)
        assert row is not None
        assert "outside the catalog's allowedLocations" in row.properties[Prop.ERROR]
        assert azurite.names(container) == {older, current}
