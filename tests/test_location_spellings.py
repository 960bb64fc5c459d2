"""One rule for "may this be deleted", whatever the spelling (``storage.uri.checked_location``).

A live table's location, or a path inside it, spelt another way (``..``, ``.`` and
empty segments, a trailing slash, percent-encoded dots and slashes, a backslash,
another case of a case-insensitive Azure account or container, another scheme for the
same store) is either refused by the rule every delete goes through, or judged to be
that live table's by the overlap check. And every root a dropped table has (its
location, ``write.data.path``, ``write.metadata.path``) is judged against the live
tables, by the purge and by the reclaim.

The reclaim's three spellings (``ns/leaked/../live``, ``ns/./live``, ``ns//live``) each
deleted a registered live table's files before: here through the engine, the CLI and
the reclaim job, on local storage, PostgreSQL and SQLite.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.table import Table

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.catalogs import catalog_entity
from polaris_pipeline.cleanup.guard.paths import PathGuard
from polaris_pipeline.cli.main import main
from polaris_pipeline.errors import GuardRefusal
from polaris_pipeline.execution.runner import Runner, Status
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.leaks.reclaim import DAY_MS, reclaim_root
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import judge
from polaris_pipeline.storage.uri import checked_location, split_uri
from polaris_pipeline.tasks.model import TABLE_LIKE_TYPE_CODE
from tests.support.iceberg import Warehouse, table_files
from tests.support.leaks import age_local_files, reclaim_job
from tests.support.unreferenced import live_entity

# -- the rule, for every store: each spelling refused or judged live ----------------------

# A live table's location on each store we delete on, and the other schemes that name
# the same store (Polaris's StorageLocation reads them as one).
LIVE = {
    "file:///wh/ns/live": ("file:/", "file:///", "file://localhost/", "/"),
    "s3://bkt/wh/ns/live": ("s3://", "s3a://", "s3n://"),
    "gs://bkt/wh/ns/live": ("gs://", "gcs://"),
    "abfss://ctr@acct.dfs.core.windows.net/wh/ns/live": (
        "abfss://",
        "abfs://",
        "wasbs://",
        "wasb://",
    ),
}
_ENCODINGS = {".": ("%2e", "%2E"), "/": ("%2f", "%2F")}


def _authority_and_path(location: str) -> tuple[str, list[str]]:
    scheme, rest = split_uri(location)
    if scheme == "file":
        return "", rest.strip("/").split("/")
    authority, _, path = rest.partition("/")
    return authority, path.split("/")


@st.composite
def spellings(draw: st.DrawFn) -> tuple[str, str]:
    """``(live location, a spelling of it or of a path inside it)``."""
    location = draw(st.sampled_from(sorted(LIVE)))
    authority, segments = _authority_and_path(location)
    segments = segments + draw(
        st.lists(st.sampled_from(["data", "metadata", "f.parquet"]), max_size=2)
    )
    # Tricks a filesystem or a decoding client resolves back to these segments.
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(1, len(segments)))
        trick = draw(st.sampled_from(["dotdot", "dot", "empty", "encoded-dot", "encoded-slash"]))
        if trick == "dotdot":
            segments[at:at] = [draw(st.sampled_from(["x", "leaked", "live_2"])), ".."]
        elif trick == "dot":
            segments[at:at] = ["."]
        elif trick == "empty":
            segments[at:at] = [""]
        elif trick == "encoded-dot":
            segments[at:at] = ["x", draw(st.sampled_from(_ENCODINGS["."])) * 2]
        else:
            i = at - 1
            segments[i : i + 2] = [draw(st.sampled_from(_ENCODINGS["/"])).join(segments[i : i + 2])]
    path = "/".join(segments)
    if draw(st.booleans()):
        path = path.replace("/", "\\", 1) if draw(st.booleans()) else path + "/"
    if authority and "@" in authority and draw(st.booleans()):
        authority = authority.upper()
    scheme = draw(st.sampled_from(LIVE[location]))
    # A local location's schemes end where its path begins (file:/, file:///, /).
    return location, f"{scheme}{authority}/{path}" if authority else f"{scheme}{path}"


@given(spellings())
def test_every_spelling_of_a_live_location_is_refused_or_judged_live(
    case: tuple[str, str],
) -> None:
    location, spelt = case
    try:
        loc = checked_location(spelt, directory=True)
    except ValueError:
        return  # refused: nothing is checked or deleted under this spelling
    # Accepted: then it is that table's location or a path inside it, and the overlap
    # check a reclaim or purge runs finds the live table.
    hit = judge(
        loc,
        realm_id="POLARIS",
        catalog_id=1,
        entity_id=7,
        type_code=TABLE_LIKE_TYPE_CODE,
        name="live",
        properties={"location": location},
    )
    assert hit is not None, f"{spelt!r} is accepted as {loc} and not judged live"


@pytest.mark.parametrize(
    ("spelt", "reason"),
    [
        ("s3://bkt/wh/ns/leaked/../live", "'..' segment"),
        ("s3://bkt/wh/ns/./live", "'.' segment"),
        ("s3://bkt/wh/ns//live", "empty segment"),
        ("s3://bkt/wh/ns/x/%2e%2e/live", "percent-encoded '%2e'"),
        ("s3://bkt/wh/ns%2Flive", "percent-encoded '%2F'"),
        ("file:///wh/ns\\live", "backslash"),
        ("s3:///wh/ns/live", "no bucket or host"),
        ("file:///wh/ns/li\x85ve", "control character"),
    ],
)
def test_the_rule_names_what_it_refuses(spelt: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        checked_location(spelt, directory=True)


def test_the_path_guard_refuses_by_the_same_rule() -> None:
    guard = PathGuard(["s3://bkt/wh/ns/t"])
    guard.check("s3://bkt/wh/ns/t/data/f.parquet")
    for spelt in ("s3://bkt/wh/ns/t/x/%2e%2e/f", "s3://bkt/wh/ns/t/data\\f", "s3://bkt/wh/ns/t//f"):
        with pytest.raises(GuardRefusal):
            guard.check(spelt)


def test_azure_account_and_container_compare_in_any_case() -> None:
    upper = checked_location("abfss://CTR@ACCT.dfs.core.windows.net/wh/t", directory=True)
    lower = checked_location("wasbs://ctr@acct.blob.core.windows.net/wh/t", directory=True)
    assert upper == lower
    # S3 keeps case: a bucket named otherwise may be another (legacy) bucket.
    assert checked_location("s3://Bkt/wh/t") != checked_location("s3://bkt/wh/t")


# -- the reclaim: three spellings of a live table, through engine, CLI and job ----------

SPELT = ["{ns}/leaked/../live", "{ns}/./live", "{ns}//live"]


def _path(uri: str) -> Path:
    return Path(split_uri(uri)[1])


def _live_beside_a_leak(store: Metastore, wh: Warehouse) -> Table:
    """A registered live table ``ns/live`` beside a leaked root ``ns/leaked``, all old."""
    catalog_entity(store, "cat", wh.uri)
    leaked = wh.build("leaked", appends=1)
    live = wh.build("live", appends=1)
    live_entity(store, live.location(), name="live")
    for table in (leaked, live):
        age_local_files(_path(table.location()), days=10)
    return live


def _spelt(live: Table, spelling: str) -> str:
    return spelling.format(ns=live.location().rstrip("/").rsplit("/", 1)[0])


@pytest.mark.parametrize("spelling", SPELT)
def test_the_engine_refuses_a_live_table_spelt_otherwise(
    metastore: Metastore, local_warehouse: Warehouse, spelling: str
) -> None:
    live = _live_beside_a_leak(metastore, local_warehouse)
    files = built_tables.list_files(live.location())
    report = reclaim_root(
        metastore, local_warehouse.resolver, _spelt(live, spelling), min_age_ms=DAY_MS
    )
    assert report.refusal is not None and "may be reclaimed" in report.refusal
    assert report.deleted == 0
    assert built_tables.list_files(live.location()) == files


@pytest.mark.parametrize("spelling", SPELT)
def test_the_cli_refuses_a_live_table_spelt_otherwise(
    metastore: Metastore, local_warehouse: Warehouse, spelling: str
) -> None:
    live = _live_beside_a_leak(metastore, local_warehouse)
    files = built_tables.list_files(live.location())
    url = metastore.engine.url.render_as_string(hide_password=False)
    out = io.StringIO()
    code = main(["leaks", "--metastore", url, "--reclaim", _spelt(live, spelling)], out)
    assert code == 2
    assert "may be reclaimed" in out.getvalue()
    assert built_tables.list_files(live.location()) == files


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("spelling", SPELT)
def test_the_reclaim_job_refuses_a_live_table_spelt_otherwise(
    metastore: Metastore, local_warehouse: Warehouse, spelling: str
) -> None:
    live = _live_beside_a_leak(metastore, local_warehouse)
    files = built_tables.list_files(live.location())
    spelt = _spelt(live, spelling)
    ok, meta = reclaim_job(metastore, [spelt])
    assert not ok
    [root] = meta["roots"]
    assert root["root"] == spelt and "may be reclaimed" in root["refusal"]
    assert built_tables.list_files(live.location()) == files


def test_a_reclaim_root_reached_through_a_symlink_is_judged_where_it_leads(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    live = _live_beside_a_leak(metastore, local_warehouse)
    files = built_tables.list_files(live.location())
    ns = _path(live.location()).parent
    os.symlink(ns / "live", ns / "alias")
    report = reclaim_root(
        metastore, local_warehouse.resolver, f"file://{ns}/alias", min_age_ms=DAY_MS
    )
    assert report.refusal is not None and "overlap with live table-like 'live'" in report.refusal
    assert built_tables.list_files(live.location()) == files


@pytest.mark.parametrize("where", ["inside", "holds"])
def test_a_reclaim_root_and_a_live_tables_write_path_never_meet(
    metastore: Metastore, local_warehouse: Warehouse, where: str
) -> None:
    """A live table whose data lies under the leaked root (its write.data.path), or
    whose write.data.path holds the root: its files are there, whatever its location."""
    wh = local_warehouse
    catalog_entity(metastore, "cat", wh.uri)
    leaked = wh.build("leaked", appends=1)
    age_local_files(_path(leaked.location()), days=10)
    data_path = f"{leaked.location()}/data" if where == "inside" else wh.uri + "/ns"
    live_entity(
        metastore,
        f"{wh.uri}/elsewhere/live",
        name="live",
        properties={"location": f"{wh.uri}/elsewhere/live", "write.data.path": data_path},
    )
    files = built_tables.list_files(leaked.location())
    report = reclaim_root(metastore, wh.resolver, leaked.location(), min_age_ms=DAY_MS)
    assert report.refusal is not None and "write.data.path" in report.refusal
    assert "'live'" in report.refusal
    assert built_tables.list_files(leaked.location()) == files


# -- the purge: every root of a dropped table is judged against the live tables -------


@pytest.mark.parametrize("key", ["write.data.path", "write.metadata.path"])
def test_a_dropped_tables_write_path_inside_a_live_table_refuses_the_purge(
    metastore: Metastore, local_warehouse: Warehouse, key: str
) -> None:
    wh = local_warehouse
    live = wh.build("live", appends=1)
    live_entity(metastore, live.location(), name="live")
    inside = f"{live.location().rstrip('/')}/{key.split('.')[1]}-of-t"
    dropped = wh.build("t", appends=1, properties={key: inside})
    written_inside = {f for f in table_files(dropped) if f.startswith(inside + "/")}
    assert written_inside, "the dropped table wrote files inside the live one"
    task = built_tasks.drop_table_task(dropped)
    metastore.insert_tasks([task])
    before = wh.files()

    with Runner(metastore, wh.config, resolver=wh.resolver, run_id="run-roots") as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    [parent] = outcomes
    assert (parent.status, parent.permanent) == (Status.DEAD, True), parent.error
    assert parent.error is not None and "SharedLocationRefusal" in parent.error
    assert "'live'" in parent.error and "the prefix lies inside it" in parent.error
    assert wh.files() == before, "nothing is deleted once a root lies inside a live table"
