"""Catalog storage mode on Azure: a pyiceberg table on Azurite, dropped as Polaris
drops it (storage_configuration_info of type AzureStorageConfigurationInfo), purged
through adlfs with a SAS the sweeper makes from its configured account key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from pyiceberg.table import Table

from polaris_pipeline.errors import StorageError
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.runner import Runner, Status
from polaris_pipeline.storage.azure_credentials import (
    AzureCredentials,
    configured_key,
    parse_location,
)
from polaris_pipeline.storage.catalog_config import STORAGE_CONFIG_KEY
from polaris_pipeline.storage.guard import PathGuard
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.tasks.model import Prop, TaskRow
from polaris_pipeline.testing import tables as testing_tables
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, azurite  # noqa: F401
from tests.support.tasks import batch_task, sqlite_metastore


def _location(container: str, path: str = "wh") -> str:
    return f"abfs://{container}@{ACCOUNT}.dfs.core.windows.net/{path}"


def _storage_info(container: str) -> str:
    return json.dumps(
        {
            "@type": "AzureStorageConfigurationInfo",
            "storageType": "AZURE",
            "allowedLocations": [_location(container)],
            "tenantId": "00000000-0000-0000-0000-000000000000",
        }
    )


@pytest.fixture
def sweeper_key(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The sweeper's configured key, the Azure SDK's way."""
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Metastore]:
    store = sqlite_metastore(tmp_path)
    yield store
    store.engine.dispose()


def _table(azurite: Azurite, tmp_path: Path, container: str, name: str) -> Table:  # noqa: F811
    catalog = testing_tables.open_catalog(
        _location(container),
        tmp_path / f"{name}.db",
        name=name,
        properties={
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "adls.connection-string": azurite.connection_string,
            "adls.account-name": ACCOUNT,
        },
    )
    return testing_tables.build_table(catalog, ("ns", name), appends=1)


def _prefix(table: Table) -> str:
    return parse_location(table.location()).path + "/"


def _sweep(store: Metastore) -> Any:
    with Runner(store, resolver=StorageResolver()) as runner:
        return runner.sweep()


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
    table = _table(azurite, tmp_path, container, "t")
    files = {n for n in azurite.names(container) if n.startswith(_prefix(table))}
    assert files
    # Same container, a name that starts with the table's: must survive.
    neighbour = _prefix(table).rstrip("/") + "2/data/keep.parquet"
    azurite.put(container, neighbour, b"keep")
    task = testing_tables.drop_table_task(
        table, extra_internal_properties={STORAGE_CONFIG_KEY: _storage_info(container)}
    )
    store.insert_tasks([task])

    outcomes = _sweep(store)

    assert outcomes and all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    assert store.get_task("POLARIS", task.id) is None
    remaining = azurite.names(container)
    assert not {n for n in remaining if n.startswith(_prefix(table))}
    assert neighbour in remaining


def test_the_vended_sas_reaches_only_its_container(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
) -> None:
    mine, other = azurite.new_container(), azurite.new_container()
    azurite.put(other, "wh/t/secret.parquet", b"x")
    azurite.put(mine, "wh/t/data/a.parquet", b"a")
    task = TaskRow(
        realm_id="POLARIS",
        id=1,
        name="t",
        entity_version=1,
        grant_records_version=1,
        create_timestamp=0,
        last_update_timestamp=0,
        properties={},
        internal_properties={
            "storageLocation": _location(mine, "wh/t"),
            STORAGE_CONFIG_KEY: _storage_info(mine),
        },
    )
    resolver = StorageResolver(azure=AzureCredentials()).for_task(task)
    assert resolver.exists(_location(mine, "wh/t/data/a.parquet"))
    fs, _ = resolver.filesystem(_location(mine, "wh/t/data/a.parquet"))
    # The SAS (not a key) is what the filesystem holds, and it is container-scoped.
    with pytest.raises(HttpResponseError, match="failed to authenticate"):
        fs.info(f"{other}/wh/t/secret.parquet")
    with pytest.raises(StorageError, match="outside the locations"):
        resolver.filesystem(_location(mine, "elsewhere/x"))
    assert ACCOUNT_KEY not in resolver.redact(str(fs.storage_options))
    sas = fs.storage_options["connection_string"].split("SharedAccessSignature=", 1)[1]
    assert "sig=" in sas and sas not in resolver.redact(f"error with {sas}")


def test_guard_refuses_on_azure_what_it_refuses_on_s3(
    azurite: Azurite,  # noqa: F811
    sweeper_key: None,
    store: Metastore,
) -> None:
    container = azurite.new_container()
    root = _location(container, "wh/ns/t")
    inside = _location(container, "wh/ns/t/data/a.parquet")
    sibling = _location(container, "wh/ns/t2/data/b.parquet")
    other = f"abfs://other@{ACCOUNT}.dfs.core.windows.net/wh/ns/t/data/c.parquet"
    dotdot = _location(container, "wh/ns/t/../t2/data/b.parquet")
    for uri in (inside, sibling):
        azurite.put(container, parse_location(uri).path, b"x")
    guard = PathGuard([root])
    admitted, refused = guard.split([inside, sibling, other, dotdot, root])
    assert admitted == [inside]
    reasons = {r.path: r.reason for r in refused}
    assert "outside the table location" in reasons[sibling]
    assert "other host" in reasons[other]
    assert reasons[dotdot] == "'..' segment"
    assert reasons[root] == "is a table location itself"
    # End to end: a batch task naming all of them deletes only the admitted file and
    # records why it refused the others.
    task = batch_task(
        "POLARIS",
        [inside, sibling, dotdot],
        internal={"storageLocation": root, STORAGE_CONFIG_KEY: _storage_info(container)},
    )
    store.insert_tasks([task])

    _sweep(store)

    row = store.get_task("POLARIS", task.id)
    assert row is not None and "guard refused 2 path(s)" in row.properties[Prop.ERROR]
    assert azurite.names(container) == {"wh/ns/t2/data/b.parquet"}
