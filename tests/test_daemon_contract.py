"""The contract's run tags and a user's translator through a real ``dagster-daemon``.

The daemon loads ``tests/support/translator_location.py``: the repository's code
location built with ``LakeTranslator`` (a ``PolarisTranslator`` subclass), as a
project's own ``definitions.py`` would. Nothing runs in-process: the sweeper
requests the runs, run workers execute them, the run report sensor records the
catalog's events and tags a run stamped before one it has read; the test reads the
instance.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from dagster import AssetKey, DagsterRunStatus, RunsFilter

from builders.runs import finished_task_run, has_total
from builders.tasks import batch_task
from polaris_pipeline.dagster.contract import (
    CONTRACT_VERSION,
    ORPHANED_CHILDREN,
    TAG_ATTEMPT,
    TAG_CONTRACT,
    TAG_EXECUTOR,
    TAG_TABLE,
    TAG_TASK_TYPE,
)
from polaris_pipeline.tasks.model import Prop
from polaris_pipeline.tasks.payloads import batch_cleanup_task_name
from tests.support.daemon_fixtures import existing, metastore_for, touch_files
from tests.support.translators import TEAM, TEAM_TAG

REALM = "POLARIS"
LOCATION = "tests.support.translator_location"


def test_a_translator_and_the_tags_of_a_grouped_run_through_the_daemon(
    tmp_path: Path, pg_url: str, start_daemon
) -> None:
    wh = tmp_path / "wh" / "ns" / "t"
    location = {"storageLocation": f"file://{wh}"}
    store = metastore_for(pg_url)
    parent = "entityCleanup_4711"
    # Orphaned children of one purge (the parent row gone): one run. The second
    # child failed twice before, so this run's lease on it is its third attempt.
    children, every_file = [], []
    for n, extra in ((0, None), (1, {Prop.ATTEMPT_COUNT: "2"})):
        files = touch_files(wh / "metadata" / f"c{n}", 2)
        every_file += files
        name = batch_cleanup_task_name(parent, files)
        children.append(batch_task(REALM, files, name=name, extra=extra, internal=location))
    lone_files = touch_files(wh / "data", 3)
    every_file += lone_files
    lone = batch_task(REALM, lone_files, internal=location)
    store.insert_tasks([*children, lone])
    daemon = start_daemon(metastore_url=pg_url, lease_timeout_ms=30_000, module=LOCATION)

    daemon.wait_for(lambda: store.count_tasks() == 0, timeout_s=120, what="every task done")
    runs = daemon.wait_runs_finished(timeout_s=30)
    assert existing(every_file) == []
    assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS] * 2, daemon.diagnose()
    [grouped] = [r for r in runs if r.tags.get(TAG_TASK_TYPE) == ORPHANED_CHILDREN]
    [single] = [r for r in runs if r is not grouped]
    for run in runs:
        assert run.tags[TAG_CONTRACT] == str(CONTRACT_VERSION)
    # Issue 26: the grouped run names its executor and its children's highest attempt.
    assert grouped.tags[TAG_EXECUTOR].endswith(f":run:{grouped.run_id}")
    assert grouped.tags[TAG_ATTEMPT] == "3"
    # The subclass's tag, beside the contract's.
    assert single.tags[TEAM_TAG] == TEAM and single.tags[TAG_TABLE] == "ns.t"

    # The run report records the table under the subclass's asset key: one event per
    # run, each with that run's own numbers (the grouped children name the table by
    # their tableId, so both runs record it; which finishes last is not fixed).
    key = AssetKey(["lake", "purged", REALM, "catalog_unknown", "ns", "t"])

    def deleted_by_run() -> dict[str, int]:
        records = daemon.instance.fetch_materializations(key, limit=10).records
        found: dict[str, int] = {}
        for record in records:
            materialization = record.asset_materialization
            assert materialization is not None
            meta = materialization.metadata
            found[meta["run"].value] = meta["files deleted"].value
        return found

    daemon.wait_for(
        lambda: len(deleted_by_run()) == 2, timeout_s=90, what="both runs' events under lake/purged"
    )
    assert deleted_by_run() == {single.run_id: 3, grouped.run_id: 4}
    default_key = AssetKey(["polaris", REALM, "catalog_unknown", "ns", "t"])
    assert daemon.instance.get_latest_materialization_event(default_key) is None

    # The report sensor's cursor stays SETTLE_S behind: a finished run stamped before
    # one it has read (its worker's clock behind) is still tagged at a later tick.
    instance = daemon.instance
    later = finished_task_run(instance)
    [record] = instance.get_run_records(RunsFilter(run_ids=[later]))
    daemon.wait_for(lambda: has_total(instance, later), timeout_s=90, what="the sensor's tag")
    earlier = finished_task_run(instance, record.update_timestamp - timedelta(seconds=5))
    daemon.wait_for(
        lambda: has_total(instance, earlier),
        timeout_s=90,
        what="the tag of a run stamped before a read one",
    )
