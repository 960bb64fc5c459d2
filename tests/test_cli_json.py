"""The CLI's JSON is for scripts: ids survive a double-based parser, times are ISO 8601.

jq and JavaScript parse numbers as doubles: 3008983788998583856 became
3008983788998584000, and ``tasks show`` then said "no task". Each document
here is parsed with every number turned into a float, as such a parser does.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from datetime import datetime
from typing import Any

import pytest

from builders import tasks as built_tasks
from builders.tasks import batch_task
from polaris_pipeline.cli import main
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.tasks.model import Prop
from tests.support.iceberg import Warehouse

BIG_ID = 3008983788998583856  # above 2**53: a double cannot hold it
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLARIS_PIPELINE_REALMS", "POLARIS_PIPELINE_GRACE_MS", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def run_json(*argv: str) -> Any:
    out = io.StringIO()
    code = main([*argv, "--json"], out=out)
    assert code in (0, 1), out.getvalue()
    # What jq or JavaScript would see: every number a double.
    return json.loads(out.getvalue(), parse_int=float, parse_float=float)


def url_of(store: Metastore) -> str:
    return store.url.render_as_string(hide_password=False)


def assert_time_pair(doc: dict[str, Any], key: str) -> None:
    ms, iso = doc[f"{key}_ms"], doc[key]
    if ms is None:
        assert iso is None
        return
    assert ISO.match(iso), iso
    parsed = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    assert round(parsed.timestamp() * 1000) == ms


def test_the_double_parser_really_loses_the_id() -> None:
    # The premise of this module: the number form does not round-trip.
    assert int(json.loads(str(BIG_ID), parse_int=float)) != BIG_ID


def test_list_and_show_ids_round_trip_and_times_are_iso(metastore: Metastore) -> None:
    task = batch_task(
        "POLARIS",
        ["/wh/ns/t/a.avro"],
        extra={
            Prop.STATUS: "failed",
            Prop.ATTEMPT_COUNT: "1",
            Prop.NEXT_ATTEMPT: str(metastore.now_ms() + 60_000),
            Prop.EXECUTOR: "polaris-pipeline:run:x",
            Prop.START_TIME: str(metastore.now_ms() - 120_000),
            Prop.END_TIME: str(metastore.now_ms() - 119_000),
        },
    )
    metastore.insert_tasks([dataclasses.replace(task, id=BIG_ID)])
    url = url_of(metastore)
    (doc,) = run_json("tasks", "list", "--metastore", url)
    assert doc["id"] == str(BIG_ID) and int(doc["id"]) == BIG_ID
    assert doc["state"] == "backing-off"
    for key in ("created", "next_attempt", "last_attempt_start", "last_attempt_end"):
        assert_time_pair(doc, key)
        assert doc[f"{key}_ms"] is not None
    # A script feeds the id it read back to the CLI, and finds the task.
    shown = run_json("tasks", "show", doc["id"], "--metastore", url)
    assert shown["id"] == str(BIG_ID) and shown["realm"] == "POLARIS"
    assert shown["payload"]["table"] == "ns.t" and shown["payload"]["batch_files"] == 1
    assert_time_pair(shown, "available_at")


def test_a_hostile_time_is_null_beside_its_millis(metastore: Metastore) -> None:
    task = batch_task("POLARIS", [], extra={Prop.NEXT_ATTEMPT: "999999999999999999"})
    metastore.insert_tasks([task])
    (doc,) = run_json("tasks", "list", "--metastore", url_of(metastore))
    assert doc["next_attempt_ms"] == 999999999999999999.0 and doc["next_attempt"] is None


@pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)
def test_sweep_json_has_each_task_and_counts_roots_and_children_apart(
    metastore: Metastore, local_warehouse: Warehouse
) -> None:
    table = local_warehouse.build("payments", appends=2)
    root = built_tasks.drop_table_task(table, create_timestamp=metastore.now_ms() - 600_000)
    metastore.insert_tasks([root])
    url = url_of(metastore)

    plan = run_json("sweep", "--dry-run", "--metastore", url)
    (planned,) = plan["tasks"]
    assert planned["id"] == str(root.id) and planned["table"] == "ns.payments"
    assert plan["nothing_available"] is None

    doc = run_json("sweep", "--metastore", url)
    outcomes = doc["outcomes"]
    roots = [o for o in outcomes if o["role"] == "root"]
    children = [o for o in outcomes if o["role"] == "child"]
    assert [o["id"] for o in roots] == [str(root.id)]
    assert children and all(o["parent_id"] == str(root.id) for o in children)
    assert {o["id"] for o in children} == set(roots[0]["children"])
    assert all(isinstance(o["id"], str) and int(o["id"]) > 0 for o in outcomes)
    assert all(o["table"] == "ns.payments" and o["status"] == "done" for o in outcomes)
    assert doc["roots"]["tasks"] == 1 and doc["children"]["tasks"] == len(children)
    assert doc["tasks"] == doc["done"] == 1 + len(children)
    assert doc["files_deleted"] == sum(o["files_deleted"] for o in outcomes) > 0
    assert metastore.list_tasks() == []


def test_list_gives_each_task_its_realm_s_polaris_release(metastore: Metastore) -> None:
    """Schema v5 (the fixture's): NEW's typed Polaris row says 1.7+; --polaris-version wins."""
    metastore.insert_tasks([batch_task("NEW", ["/wh/ns/t/a.avro"])])
    url = url_of(metastore)
    (doc,) = run_json("tasks", "list", "--metastore", url)
    release = doc["polaris_release"]
    assert (release["release"], release["at_least"], release["source"]) == (
        "1.7",
        True,
        "batch-rows",
    )
    assert release["schema_version"] == 5
    assert f"BATCH task {doc['id']} written by Polaris has type" in release["evidence"]
    (doc,) = run_json("tasks", "list", "--metastore", url, "--polaris-version", "1.8")
    assert doc["polaris_release"]["release"] == "1.8"
    assert doc["polaris_release"]["source"] == "configured"
