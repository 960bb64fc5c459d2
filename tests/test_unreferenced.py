"""A dropped table's unreferenced files: deleted, reported, or refused, never a live one's.

Every case drops a real pyiceberg table (local files and moto S3) that also has
files its last metadata does not name (a failed commit's data files, an old
metadata file beyond the log, stray ``.crc`` sidecars on local files), with a
live neighbour whose name shares the prefix (``t`` / ``t_2``), and sweeps it
through the ``Runner`` against a real metastore.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from pyiceberg.table import Table

from builders import tables as built_tables
from builders import tasks as built_tasks
from polaris_pipeline.cleanup.context import CleanupContext
from polaris_pipeline.execution.dry_run import dry_run
from polaris_pipeline.execution.runner import Runner, Status, TaskOutcome
from polaris_pipeline.execution.sweep import sweep_tasks
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.metastore.overlap import LiveLocations, Overlap, escape_like, overlap_terms
from polaris_pipeline.settings.realm import RealmOverride
from polaris_pipeline.storage.config import StorageConfig
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import Location, parse_location, split_uri
from polaris_pipeline.tasks.model import NewTask, Prop, TaskPolicy, TaskState
from polaris_pipeline.tasks.payloads import decode_dropped_entity
from polaris_pipeline.unreferenced.listing import prefix_refusal, run_unreferenced
from polaris_pipeline.unreferenced.mode import UnreferencedMode
from polaris_pipeline.unreferenced.report import UnreferencedReport
from tests.support.iceberg import BUILT_NEIGHBOUR, BUILT_TABLE, Warehouse, table_files
from tests.support.metastore import with_policy
from tests.support.unreferenced import (
    NAMESPACE_TYPE_CODE,
    add_unreferenced,
    live_entity,
    settle,
    unlistable_directory,
    write_after,
)


@dataclasses.dataclass
class Dropped:
    table: Table
    neighbour_files: set[str]
    unreferenced: set[str]
    task: NewTask

    @property
    def location(self) -> str:
        return self.table.location()


def _drop(wh: Warehouse) -> Dropped:
    table = wh.catalog.load_table(BUILT_TABLE)
    unreferenced = add_unreferenced(table, wh.resolver)
    settle(wh.resolver, table.location())  # every file is older than the drop
    task = built_tasks.drop_table_task(table)
    return Dropped(table, wh.built_files(BUILT_NEIGHBOUR), unreferenced, task)


def _sweep(store: Metastore, wh: Warehouse, dropped: Dropped, mode: str) -> TaskOutcome:
    store.insert_tasks([dropped.task])
    with Runner(
        with_policy(store, unreferenced=mode),
        wh.config,
        resolver=wh.resolver,
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])
    assert all(o.status is Status.DONE for o in outcomes), [o.error for o in outcomes]
    [root] = [o for o in outcomes if o.lease.task_id == dropped.task.id]
    assert store.list_tasks() == []
    return root


def _report(outcome: TaskOutcome) -> UnreferencedReport:
    assert outcome.result is not None and outcome.result.unreferenced is not None
    return outcome.result.unreferenced


def _left(wh: Warehouse, location: str) -> set[str]:
    return built_tables.list_files(location, s3=wh.s3)


def test_delete_mode_deletes_every_unreferenced_file_and_the_empty_directories(
    store: Metastore, built_warehouse: Warehouse
) -> None:
    dropped = _drop(built_warehouse)

    report = _report(_sweep(store, built_warehouse, dropped, "delete"))

    assert report.refusal is None and report.error is None, report
    assert report.deleted == len(dropped.unreferenced) == report.listed
    assert report.kept_newer == 0 and report.failures == 0
    assert report.bytes_deleted is not None and report.bytes_deleted > 0
    assert _left(built_warehouse, dropped.location) == set()
    assert all(built_warehouse.exists(f) for f in dropped.neighbour_files)
    if built_warehouse.kind == "local":
        assert report.directories_removed >= 3
        assert not Path(split_uri(dropped.location)[1]).exists()
        # The namespace directory holding the neighbour stays.
        assert Path(split_uri(dropped.location)[1]).parent.is_dir()
    assert "unreferenced" in report.summary() and "deleted" in report.summary()
    # What a purge reported done leaves is stated: here nothing.
    assert report.left == 0 and report.summary().endswith("; the prefix is empty")


def test_report_mode_lists_everything_and_deletes_nothing(
    store: Metastore, built_warehouse: Warehouse
) -> None:
    dropped = _drop(built_warehouse)

    report = _report(_sweep(store, built_warehouse, dropped, "report"))

    assert report.deleted == 0 and report.would_delete == len(dropped.unreferenced)
    assert set(report.paths) == dropped.unreferenced
    assert _left(built_warehouse, dropped.location) == dropped.unreferenced
    assert all(built_warehouse.exists(f) for f in dropped.neighbour_files)
    assert "would go" in report.summary()
    # What is left under the prefix is stated, and is exactly what a listing finds.
    assert report.left == len(_left(built_warehouse, dropped.location)) > 0
    assert report.summary().endswith(f"; {report.left} object(s) left under it")


def test_off_mode_and_a_realm_override_run_no_phase(
    tmp_path: Path, built_local_warehouse: Warehouse
) -> None:
    policy = TaskPolicy(
        lease_timeout_ms=60_000,
        grace_ms=0,
        realm_overrides={"POLARIS": RealmOverride(unreferenced="off")},
    )
    store = Metastore(f"sqlite:///{tmp_path}/o.db", policy=policy)
    store.init_schema()
    dropped = _drop(built_local_warehouse)

    root = _sweep(store, built_local_warehouse, dropped, "delete")

    assert root.result is not None and root.result.unreferenced is None
    assert _left(built_local_warehouse, dropped.location) == dropped.unreferenced
    store.dispose()


def test_an_object_newer_than_the_drop_is_kept_and_reported(
    store: Metastore, built_warehouse: Warehouse
) -> None:
    dropped = _drop(built_warehouse)
    store.insert_tasks([dropped.task])
    row = store.get_task(dropped.task.realm_id, dropped.task.id)
    assert row is not None
    newer = write_after(
        built_warehouse.resolver,
        f"{dropped.location}/data/after-the-drop.parquet",
        b"new",
        row.create_timestamp,
    )

    with Runner(
        with_policy(store, unreferenced="delete"),
        built_warehouse.config,
        resolver=built_warehouse.resolver,
    ) as runner:
        outcomes = sweep_tasks(runner, ["POLARIS"])

    [root] = [o for o in outcomes if o.lease.task_id == dropped.task.id]
    report = _report(root)
    assert root.ok and report.kept_newer == 1
    assert any(s.startswith(newer) and "newer than the drop" in s for s in report.kept_sample)
    assert _left(built_warehouse, dropped.location) == {newer}
    assert "1 kept as newer than the drop" in report.summary()


# -- refusals: the whole prefix stays (beyond the referenced purge) --------------------


def _refused(store: Metastore, wh: Warehouse, dropped: Dropped) -> str:
    """The refusal of a sweep in ``delete`` mode, checked to have deleted nothing.

    The live entities of these cases share the table's location, so its referenced
    purge would be refused first (``cleanup/guard/shared_location.py``): the task carries
    an operator's override, which lets that purge go on and never this phase.
    """
    dropped.task.properties[Prop.ALLOW_SHARED_LOCATION] = "true"
    outcome = _sweep(store, wh, dropped, "delete")
    assert outcome.result is not None and outcome.result.shared_location_override
    report = _report(outcome)
    assert report.refusal is not None and report.deleted == 0, report
    # The referenced purge still happened; every unreferenced file stays.
    assert _left(wh, dropped.location) >= dropped.unreferenced
    assert all(wh.exists(f) for f in dropped.neighbour_files)
    return report.refusal


def test_a_live_table_created_at_the_same_location_after_the_drop_refuses(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    live_entity(metastore, dropped.location, name="t_again")

    refusal = _refused(metastore, built_local_warehouse, dropped)

    assert "overlap with live table-like 't_again'" in refusal
    assert dropped.location in refusal


def test_a_live_table_nested_under_the_location_refuses(
    metastore: Metastore, built_warehouse: Warehouse
) -> None:
    dropped = _drop(built_warehouse)
    live_entity(metastore, f"{dropped.location}/nested/inner", name="inner")

    refusal = _refused(metastore, built_warehouse, dropped)

    assert "'inner'" in refusal and "at or under the prefix" in refusal


def test_a_live_table_writing_under_the_prefix_by_its_write_data_path_refuses(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    """A live table elsewhere whose ``write.data.path`` lies under the dropped table's
    location: its data files are there and unreferenced by the dropped table."""
    wh = built_local_warehouse
    table = wh.catalog.load_table(BUILT_TABLE)
    inside = f"{table.location().rstrip('/')}/data/of_live"
    live = wh.build("live", appends=1, properties={"write.data.path": inside})
    live_files = {f for f in table_files(live) if f.startswith(inside + "/")}
    assert live_files
    live_entity(
        metastore,
        live.location(),
        name="live",
        properties={"location": live.location(), "write.data.path": inside},
    )
    settle(wh.resolver, table.location())
    dropped = Dropped(table, set(), set(), built_tasks.drop_table_task(table))

    report = _report(_sweep(metastore, wh, dropped, "delete"))

    assert report.refusal is not None and "'live'" in report.refusal, report
    assert "write.data.path is at or under the prefix" in report.refusal
    assert report.deleted == 0 and all(wh.exists(f) for f in live_files)


def test_a_namespace_whose_base_location_is_the_prefix_refuses(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    live_entity(metastore, dropped.location + "/", type_code=NAMESPACE_TYPE_CODE, name="ns2")

    refusal = _refused(metastore, built_local_warehouse, dropped)

    assert "live namespace 'ns2'" in refusal


def test_a_namespace_above_the_prefix_and_a_neighbour_sharing_its_name_do_not_refuse(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    namespace_dir = dropped.location.rsplit("/", 1)[0]
    live_entity(metastore, namespace_dir, type_code=NAMESPACE_TYPE_CODE, name="ns")
    live_entity(metastore, dropped.location + "_2", name="t_2")

    report = _report(_sweep(metastore, built_local_warehouse, dropped, "delete"))

    assert report.refusal is None and report.deleted == len(dropped.unreferenced)


def test_a_live_table_above_the_prefix_refuses(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    live_entity(metastore, dropped.location.rsplit("/", 1)[0], name="outer")

    refusal = _refused(metastore, built_local_warehouse, dropped)

    assert "the prefix lies inside it" in refusal


def test_a_malformed_entity_location_counts_as_overlapping(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    live_entity(
        metastore,
        dropped.location + "/x",
        name="broken",
        properties={"location": "not a location"},
    )

    refusal = _refused(metastore, built_local_warehouse, dropped)

    assert "malformed" in refusal


def test_the_overlap_is_checked_in_every_realm(
    metastore: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    live_entity(metastore, dropped.location, name="elsewhere", realm_id="OTHER", catalog_id=77)

    refusal = _refused(metastore, built_local_warehouse, dropped)

    assert "OTHER/" in refusal


def test_schema_v1_reads_the_entities_location_property(
    tmp_path: Path, built_local_warehouse: Warehouse
) -> None:
    store = Metastore(
        f"sqlite:///{tmp_path}/v1.db", policy=TaskPolicy(lease_timeout_ms=60_000, grace_ms=0)
    )
    store.init_schema(1)
    dropped = _drop(built_local_warehouse)
    live_entity(store, f"{dropped.location}/inner", name="inner", with_location_column=False)

    refusal = _refused(store, built_local_warehouse, dropped)

    assert "'inner'" in refusal
    store.dispose()


def test_a_catalog_whose_base_location_is_the_prefix_refuses(
    store: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    live_entity(store, dropped.location, type_code=4, name="cat")

    refusal = _refused(store, built_local_warehouse, dropped)

    assert "live catalog 'cat'" in refusal


# -- the prefix itself -----------------------------------------------------------------


def _ctx(
    storage_location: str, config: StorageConfig | None = None, **internal: str
) -> CleanupContext:
    task = built_tasks.task_row(
        NewTask(
            realm_id="POLARIS",
            id=1,
            name="entityCleanup_1",
            properties={},
            internal_properties={"storageLocation": storage_location, **internal},
        )
    )
    cfg = config or StorageConfig()
    return CleanupContext(task=task, resolver=StorageResolver(cfg), config=cfg)


@pytest.mark.parametrize("root", ["s3://bucket", "s3://bucket/", "file:/", "gs://b", "/"])
def test_a_bucket_or_filesystem_root_is_refused(root: str) -> None:
    loc, why = prefix_refusal(_ctx(root), root)
    assert loc is None and why is not None and "root" in why


@pytest.mark.parametrize(
    "prefix",
    ["file:///wh/ns/x/../live", "file:///wh/ns/./live", "s3://b/wh//live", "s3://b/%2e%2e"],
)
def test_a_prefix_the_store_would_read_as_another_is_refused(prefix: str) -> None:
    """Listed and deleted under as spelt, so judged by the one rule (checked_location)."""
    loc, why = prefix_refusal(_ctx(prefix), prefix)
    assert loc is None and why is not None and "malformed" in why


def test_a_prefix_at_or_above_an_allowed_location_is_refused() -> None:
    storage = (
        '{"@type":"FileStorageConfigurationInfo","storageType":"FILE",'
        '"allowedLocations":["file:///wh/ns/t/"]}'
    )
    ctx = _ctx("file:///wh/ns/t", storage_configuration_info=storage)
    assert prefix_refusal(ctx, "file:///wh/ns/t")[1] is not None
    assert prefix_refusal(ctx, "file:/wh/ns")[1] is not None
    assert prefix_refusal(ctx, "file:/wh/ns/t/inner")[0] is not None


def test_a_table_at_the_bucket_root_keeps_everything(
    store: Metastore, built_s3_warehouse: Warehouse
) -> None:
    bucket_root = built_s3_warehouse.uri.rsplit("/", 1)[0]
    dropped = _drop(built_s3_warehouse)
    task = dataclasses.replace(
        dropped.task,
        internal_properties={**dropped.task.internal_properties, "storageLocation": bucket_root},
    )
    before = built_s3_warehouse.files()
    store.insert_tasks([task])

    with Runner(
        with_policy(store, unreferenced="delete"),
        built_s3_warehouse.config,
        resolver=built_s3_warehouse.resolver,
    ) as r:
        [outcome, *_] = sweep_tasks(r, ["POLARIS"])

    # The referenced purge refuses a root; the unreferenced phase never runs.
    assert not outcome.ok and outcome.result is not None and outcome.result.unreferenced is None
    assert built_s3_warehouse.files() == before


def test_like_patterns_escape_the_prefix() -> None:
    assert escape_like("a_b%c\\d") == "a\\_b\\%c\\\\d"
    equal, like = overlap_terms(parse_location("s3://bkt/wh/t_1/", directory=True))
    assert "//bkt/wh/" in equal and "//bkt/wh" in equal and "//bkt/wh/t_1/" in equal
    assert like == ["//bkt/wh/t\\_1/%"]
    equal, like = overlap_terms(parse_location("file:/wh/t", directory=True))
    assert {"/wh/t", "///wh/t/", "//localhost/wh/t"} <= set(equal)


# -- the dry run's plan ----------------------------------------------------------------


def test_the_dry_run_lists_unreferenced_files_apart_from_referenced_ones(
    store: Metastore, built_warehouse: Warehouse
) -> None:
    dropped = _drop(built_warehouse)
    store.insert_tasks([dropped.task])

    with Runner(
        with_policy(store, unreferenced="delete"),
        built_warehouse.config,
        resolver=built_warehouse.resolver,
    ) as r:
        [(_, result)] = dry_run(r, ["POLARIS"])

    assert not isinstance(result, str) and result.unreferenced is not None
    assert set(result.unreferenced.paths) == dropped.unreferenced
    assert result.unreferenced.referenced > 0 and result.unreferenced.deleted == 0
    assert not set(result.would_delete) & dropped.unreferenced
    assert _left(built_warehouse, dropped.location) >= dropped.unreferenced


# -- a listing that fails half way -----------------------------------------------------


def test_a_listing_that_fails_half_way_fails_the_attempt_and_the_retry_finishes(
    store: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    table_dir = Path(split_uri(dropped.location)[1])
    unlistable_directory(table_dir / "data")
    store.insert_tasks([dropped.task])

    with Runner(
        with_policy(store, unreferenced="delete"),
        built_local_warehouse.config,
        resolver=built_local_warehouse.resolver,
    ) as r:
        outcomes = sweep_tasks(r, ["POLARIS"])

    [root] = [o for o in outcomes if o.lease.task_id == dropped.task.id]
    assert root.status is Status.FAILED and not root.permanent, root
    assert root.error is not None and "listing" in root.error and "failed" in root.error
    row = store.get_task("POLARIS", dropped.task.id)
    # Recorded (bounded), retried later.
    assert row is not None and row.last_error and row.last_error.startswith("unreferenced files of")
    # The referenced purge is done and stays done: the metadata file is gone.
    assert not built_local_warehouse.exists(dropped.table.metadata_location)
    assert all(built_local_warehouse.exists(f) for f in dropped.neighbour_files)

    # The operator removes the cause; the retry goes straight to the unreferenced phase.
    shutil.rmtree(table_dir / "data" / ("d" * 250))
    assert store.requeue("POLARIS", dropped.task.id) is TaskState.ORPHANED
    with Runner(
        with_policy(store, unreferenced="delete"),
        built_local_warehouse.config,
        resolver=built_local_warehouse.resolver,
    ) as r:
        [again] = sweep_tasks(r, ["POLARIS"])

    assert again.ok and not again.children
    assert _report(again).error is None
    assert _left(built_local_warehouse, dropped.location) == set()
    assert store.list_tasks() == []


def test_a_hadoop_file_colon_slash_location_with_a_trailing_slash(
    store: Metastore, built_local_warehouse: Warehouse
) -> None:
    dropped = _drop(built_local_warehouse)
    hadoop = "file:" + split_uri(dropped.location)[1] + "/"
    task = dataclasses.replace(
        dropped.task,
        internal_properties={**dropped.task.internal_properties, "storageLocation": hadoop},
    )

    report = _report(
        _sweep(store, built_local_warehouse, dataclasses.replace(dropped, task=task), "delete")
    )

    assert report.prefix == hadoop and report.deleted == len(dropped.unreferenced)
    assert all(p.startswith(hadoop) for p in report.paths)
    assert _left(built_local_warehouse, dropped.location) == set()
    assert all(built_local_warehouse.exists(f) for f in dropped.neighbour_files)


def test_with_nothing_unreferenced_the_empty_directories_still_go(
    store: Metastore, local_warehouse: Warehouse
) -> None:
    table = local_warehouse.build("t", appends=1)
    neighbour = table_files(local_warehouse.build("t_2", appends=1))
    task = built_tasks.drop_table_task(table)
    dropped = Dropped(table, neighbour, set(), task)

    report = _report(_sweep(store, local_warehouse, dropped, "delete"))

    assert report.listed == 0 and report.directories_removed >= 2
    assert not Path(split_uri(table.location())[1]).exists()
    assert all(local_warehouse.exists(f) for f in neighbour)


def test_a_table_created_at_the_path_during_the_sweep_stops_the_next_batch(
    store: Metastore, built_local_warehouse: Warehouse
) -> None:
    """The overlap is checked again before each batch: one created after the first
    batch stops the rest, which stay."""
    dropped = _drop(built_local_warehouse)
    _sweep(store, built_local_warehouse, dropped, "off")  # the referenced purge alone
    assert _left(built_local_warehouse, dropped.location) == dropped.unreferenced
    task = built_tasks.task_row(dropped.task)
    ctx = CleanupContext(
        task=task,
        resolver=built_local_warehouse.resolver,
        config=built_local_warehouse.config,
        delete_chunk_size=1,
    )
    live = LiveLocations(store.engine, store.check_schema())
    calls: list[int] = []

    def overlaps(prefix: Location) -> list[Overlap]:
        calls.append(1)
        if len(calls) == 3:  # before listing, before batch 1, then a table appears
            live_entity(store, dropped.location, name="created_meanwhile")
        return live.overlaps(prefix)

    entity = decode_dropped_entity(task.data())
    report = run_unreferenced(ctx, entity, UnreferencedMode.DELETE, overlaps)

    assert report.deleted == 1 and report.refusal is not None
    assert "created_meanwhile" in report.refusal
    # Everything but the one file of the first batch stays.
    assert len(_left(built_local_warehouse, dropped.location)) == len(dropped.unreferenced) - 1


def test_a_symlinked_directory_is_unlinked_never_followed(
    store: Metastore, built_local_warehouse: Warehouse, tmp_path: Path
) -> None:
    dropped = _drop(built_local_warehouse)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious.parquet").write_bytes(b"keep")
    link = Path(split_uri(dropped.location)[1]) / "data" / "linked"
    link.symlink_to(outside, target_is_directory=True)
    settle(built_local_warehouse.resolver, dropped.location)
    task = built_tasks.drop_table_task(dropped.table)

    report = _report(
        _sweep(store, built_local_warehouse, dataclasses.replace(dropped, task=task), "delete")
    )

    assert (outside / "precious.parquet").read_bytes() == b"keep"
    assert not link.is_symlink()  # the link itself went, as any file of the table
    assert report.failures == 0
