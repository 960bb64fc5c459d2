"""``tasks restore`` against Iceberg's own REST catalog server (Maven Central's
``RESTCatalogServer``, started here on 127.0.0.1), not Polaris: Polaris's server is not
among the jars this project can run, so the registered table appears in that server's
catalog, not in a Polaris metastore. The metastore is ours (SQLite), with Polaris's task
rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from builders.tasks import drop_table_task
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.restore.register import RestTarget, registered_metadata
from polaris_pipeline.restore.restore import RestoreRefused, restore
from polaris_pipeline.tasks.model import TaskRow
from polaris_pipeline.tasks.payloads import TableIdentifier
from tests.support.iceberg import Warehouse
from tests.support.iceberg_rest import RestServer
from tests.support.tasks import purge_child

pytestmark = pytest.mark.slow


def _row(store: Metastore, realm: str, task_id: int) -> TaskRow:
    row = store.get_task(realm, task_id)
    assert row is not None
    return row


def test_restore_registers_the_table_ends_its_purge_and_a_rerun_finishes(
    tmp_path: Path,
    local_warehouse: Warehouse,
    store: Metastore,
    iceberg_rest_server: RestServer,
) -> None:
    target = RestTarget(iceberg_rest_server.uri, "lake", "client", "secret-of-client")
    # The namespace outlives a table's drop: the catalog still has it.
    rest = RestCatalog("lake", uri=iceberg_rest_server.uri, credential="client:secret-of-client")
    rest.create_namespace("ns")
    table = local_warehouse.build("orders", appends=2)
    parent = drop_table_task(table)
    child = purge_child("POLARIS", parent.name, ("ns", "orders"), ["file:///x"], create_timestamp=1)
    store.insert_tasks([parent, child])
    # A run holds the child's lease: the register goes through, the ending is refused.
    lease = store.lease_task("POLARIS", child.id, "run-9")
    assert lease is not None
    records = (tmp_path / "records").as_uri()
    with pytest.raises(RestoreRefused) as caught:
        restore(
            store,
            local_warehouse.resolver,
            target,
            _row(store, "POLARIS", parent.id),
            None,
            records,
        )
    assert "registered ns.orders" in str(caught.value) and "leased by run-9" in str(caught.value)
    name = TableIdentifier(("ns",), "orders")
    assert registered_metadata(target, name) == table.metadata_location
    assert store.get_task("POLARIS", parent.id) is not None  # nothing ended
    # The run ends; the rerun finds the table registered from this very file and ends both.
    store.complete(lease)
    result = restore(
        store, local_warehouse.resolver, target, _row(store, "POLARIS", parent.id), None, records
    )
    assert result.changed
    assert any("already registered" in line for line in result.lines), result.lines
    assert store.get_task("POLARIS", parent.id) is None
    assert list((tmp_path / "records" / "POLARIS" / str(parent.id)).glob("restore-*.json"))
    # The registered table reads back: its rows, through the REST catalog.
    loaded = RestCatalog("lake", uri=iceberg_rest_server.uri).load_table(("ns", "orders"))
    assert loaded.scan().to_arrow().num_rows == table.scan().to_arrow().num_rows


def test_a_name_that_exists_is_refused_and_as_restores_beside_it(
    local_warehouse: Warehouse, store: Metastore, iceberg_rest_server: RestServer
) -> None:
    target = RestTarget(iceberg_rest_server.uri, "lake")
    rest = RestCatalog("lake", uri=iceberg_rest_server.uri)
    rest.create_namespace("ns")
    first, second = local_warehouse.build("a", appends=1), local_warehouse.build("b", appends=1)
    rest.register_table(("ns", "b"), first.metadata_location)  # someone took the name "b"
    task = drop_table_task(second)
    store.insert_tasks([task])
    with pytest.raises(RestoreRefused, match=r"ns\.b already exists"):
        restore(store, local_warehouse.resolver, target, _row(store, "POLARIS", task.id), None)
    assert store.get_task("POLARIS", task.id) is not None
    result = restore(
        store, local_warehouse.resolver, target, _row(store, "POLARIS", task.id), "ns.b_restored"
    )
    assert result.changed
    assert (
        registered_metadata(target, TableIdentifier(("ns",), "b_restored"))
        == second.metadata_location
    )
