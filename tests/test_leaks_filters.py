"""``leaks`` filters that match nothing are refused, naming what exists, and a reclaim
outside the catalogs its filters choose is refused, its root left whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders.catalogs import catalog_entity
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.storage.uri import split_uri
from tests.support.cli import run, url_of
from tests.support.iceberg import Warehouse
from tests.support.leaks import age_local_files


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLARIS_PIPELINE_REALMS", "POLARIS_PIPELINE_STORAGE_CONFIG", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def _path(uri: str) -> Path:
    return Path(split_uri(uri)[1])


def test_a_realm_or_catalog_that_matches_nothing_is_refused_naming_those_that_exist(
    store: Metastore, local_warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog_entity(store, "sales", local_warehouse.uri)
    catalog_entity(store, "ops", f"{local_warehouse.uri}/ops", realm_id="TEST")
    url = url_of(store)
    code, out = run("leaks", "--metastore", url, "--catalog", "nosuch")
    err = capsys.readouterr().err
    assert code == 2 and out == "", out
    assert "--catalog nosuch: no such catalog; catalogs: ops, sales" in err, err
    code, _ = run("leaks", "--metastore", url, "--realm", "NOSUCH")
    err = capsys.readouterr().err
    expected = "--realm NOSUCH: no catalog in that realm; realms with catalogs: POLARIS, TEST"
    assert code == 2 and expected in err, err
    # A catalog of another realm than the one chosen is no match either.
    code, _ = run("leaks", "--metastore", url, "--realm", "TEST", "--catalog", "sales")
    err = capsys.readouterr().err
    assert code == 2 and "no such catalog of realm(s) TEST; catalogs: ops" in err, err
    code, out = run("leaks", "--metastore", url, "--realm", "POLARIS", "--catalog", "sales")
    assert code == 0 and "catalog 'sales' (realm POLARIS)" in out, out


def test_a_reclaim_outside_the_chosen_catalogs_is_refused_and_deletes_nothing(
    store: Metastore, local_warehouse: Warehouse, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = local_warehouse
    catalog_entity(store, "sales", f"{wh.uri}/ns")
    catalog_entity(store, "ops", f"{wh.uri}/other")
    table = wh.build("leaked", appends=1)
    age_local_files(_path(table.location()), days=10)
    files = list(_path(table.location()).rglob("*"))
    url = url_of(store)
    code, _ = run("leaks", "--metastore", url, "--reclaim", table.location(), "--catalog", "ops")
    err = capsys.readouterr().err
    assert code == 2 and "not under the locations of the catalogs" in err and "(ops)" in err
    assert all(f.exists() for f in files)
    code, out = run(
        "leaks", "--metastore", url, "--reclaim", table.location(), "--catalog", "sales"
    )
    assert code == 0, out + capsys.readouterr().err
    assert not any(f.is_file() for f in files)
