"""The Dagster UI as an operator sees it: real runs, a real webserver, headless Chromium.

``tests/browser/seed.py`` runs the demo in a directory of its own (real Iceberg
tables dropped with purge, the sweeper sensor and one ``polaris_task_job`` run
per lease on a real Dagster instance), dead-letters one more task through a
real run, and ticks the sweeper and its watch once to report the backlog asset
and its checks (no run). Then ``dagster dev``
serves that instance on 127.0.0.1 (its daemon ticks the sensor for real) and
Chromium, driven by Playwright, checks what an operator can see:

- the ``polaris_task_sweeper`` sensor, running, with its ticks and why its first
  tick leased nothing (the live Polaris lease and the task within grace);
- runs of ``polaris_task_job`` tagged ``polaris/realm`` and ``polaris/task_id``,
  and none for the task a live Polaris holds;
- a run's logs and output metadata: what was deleted, bytes freed, the lease;
- failed runs with their one-line error, including the dead-lettered task;
- the backlog asset's counts by state and its failing dead-letter check, and
  the sweeper freshness check, which the live watch sensor turns green;
- each run's ``polaris/table`` tag and ``polaris/total`` (the run report sensor),
  and the purged table's event in the asset catalog, linking back to the run;
- the alert sensors, stopped until a destination is configured, saying so.

Screenshots land in ``test-artifacts/browser/``. Chromium is Debian's
(``scripts/install-browser.sh``), launched by path: nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api

from builders.ports import free_port

expect = sync_api.expect

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = os.environ.get("POLARIS_PIPELINE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DAGSTER = str(Path(sys.executable).parent / "dagster")
SENSOR_PATH = "/locations/definitions/sensors/polaris_task_sweeper"
UI_TIMEOUT_MS = 20_000
SERVER_START_S = 120
FIRST_TICK_S = 60

pytestmark = [pytest.mark.timeout(360), pytest.mark.slow]
expect.set_options(timeout=UI_TIMEOUT_MS)


# -- fixtures ------------------------------------------------------------------


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The seeded directory, and what the UI should show of it."""
    root = tmp_path_factory.mktemp("ui")
    facts_path = root / "facts.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.browser.seed", str(root / "demo"), str(facts_path)],
        cwd=ROOT,
        env=_env(DAGSTER_HOME=str(root / "unused")),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(json.loads(facts_path.read_text()))


@pytest.fixture(scope="module")
def server(facts: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dagster dev`` on the seeded instance; yields its base URL once the sensor ticked."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("dagster-dev") / "dagster-dev.log"
    env = _env(
        DAGSTER_HOME=facts["dagster_home"],
        POLARIS_METASTORE_URL=facts["metastore_url"],
        POLARIS_PIPELINE_MAX_ATTEMPTS=str(facts["max_attempts"]),
        POLARIS_PIPELINE_LEASE_TIMEOUT_MS=str(facts["lease_timeout_ms"]),
        # The first evaluation sweeps at once; none after it within the test.
        POLARIS_PIPELINE_SWEEPER_INTERVAL_SECONDS="3600",
        # Under `dagster dev` the sweeper starts only when told to.
        POLARIS_PIPELINE_SWEEPER_AUTOSTART="true",
    )
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [DAGSTER, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: teardown stops all of it
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(base, proc, log_path)
        facts["first_tick"] = _wait_for_first_tick(base)
        yield base
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-browser.sh")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path_factory.getbasetemp())
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1600, "height": 1000},
        )
        # Dagster's first-visit "join the community" dialog would cover every page.
        context.add_init_script("window.localStorage.setItem('communityNux', '\"1\"')")
        context.set_default_timeout(UI_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Any]:
    page = browser.new_page()
    page.base = server
    try:
        yield page
    finally:
        page.close()


# -- helpers -------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POLARIS_", "DAGSTER_"))}
    env.update(extra)
    return env


def _wait_until_serving(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster dev exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/server_info", timeout=2) as response:
                if response.status == 200 and "dagster_webserver_version" in json.load(response):
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"dagster dev not serving after {SERVER_START_S} s:\n{log.read_text()[-3000:]}")


_TICKS_QUERY = """
query {
  sensorOrError(sensorSelector: {repositoryLocationName: "definitions",
      repositoryName: "__repository__", sensorName: "polaris_task_sweeper"}) {
    __typename
    ... on Sensor { sensorState { status ticks(limit: 50) { status skipReason runIds } } }
  }
}
"""


def _graphql(base: str, query: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.load(response)["data"])


def _wait_for_first_tick(base: str) -> dict[str, Any]:
    """The daemon's first evaluation of the sweeper (it sweeps at once: no cursor yet)."""
    deadline = time.monotonic() + FIRST_TICK_S
    while time.monotonic() < deadline:
        try:
            sensor = _graphql(base, _TICKS_QUERY)["sensorOrError"]
        except (OSError, KeyError, TypeError, ValueError):
            sensor = {}
        ticks = (sensor.get("sensorState") or {}).get("ticks") or []
        done = [t for t in ticks if t["status"] != "STARTED"]
        if done:
            return dict(done[-1])  # newest first: the last is the first tick
        time.sleep(1)
    pytest.fail(f"the sweeper sensor did not tick within {FIRST_TICK_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``dagster dev`` and everything it started (its own process group)."""
    if proc.poll() is not None:
        return
    pgid = os.getpgid(proc.pid)
    os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)  # children that outlive the parent, too
    if proc.poll() is None:
        proc.wait(timeout=10)


def _shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _goto(page: Any, path: str) -> None:
    page.goto(page.base + path, wait_until="domcontentloaded")


def _snapshot_once_shown(page: Any, *patterns: str) -> str:
    """The page's aria snapshot once every pattern is in it, or after UI_TIMEOUT_MS.

    A list's rows and their statuses load after its heading: one snapshot taken at
    the heading can hold none of them (seen in CI, a check's detail without the list).
    """
    deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
    while True:
        listing: str = page.locator("body").aria_snapshot()
        if all(re.search(p, listing) for p in patterns) or time.monotonic() > deadline:
            return listing
        page.wait_for_timeout(500)


def _run(facts: dict[str, Any], label: str, *, success: bool) -> dict[str, Any]:
    return next(r for r in facts["runs"] if r["label"] == label and r["success"] is success)


def _table(facts: dict[str, Any], role: str, name: str | None = None) -> dict[str, Any]:
    return next(
        t for t in facts["tables"] if t["role"] == role and (name is None or t["name"] == name)
    )


def _runs_with_tag(page: Any, key: str, value: str) -> None:
    query = urllib.parse.quote(f"tag:{key}={value}")
    _goto(page, f"/runs?q%5B0%5D={query}")


def _filter_logs(page: Any, text: str) -> None:
    page.get_by_placeholder("Filter…").fill(text)


# -- the sensor ----------------------------------------------------------------


def test_sensor_page_shows_the_sweeper_running_and_its_ticks(
    page: Any, facts: dict[str, Any]
) -> None:
    first = facts["first_tick"]
    # The live Polaris lease and the task within grace are left alone; the two
    # dead tasks are not retried; nothing else is available.
    assert first["status"] == "SKIPPED", first
    reason = first["skipReason"]
    assert reason.startswith(
        "no orphaned tasks in realms [POLARIS]; 1 pending within grace, 1 leased, "
        "0 backing off, 2 dead; next sweep in "
    ), reason

    _goto(page, SENSOR_PATH)
    expect(page.get_by_text("Selects available Polaris cleanup tasks")).to_be_visible()
    expect(page.get_by_role("link", name="polaris_task_job").first).to_be_visible()
    expect(page.get_by_role("checkbox").first).to_be_checked()  # the "Running" switch
    rows = page.locator("tbody tr").filter(has=page.get_by_role("button", name="View logs"))
    expect(rows.first).to_be_visible()
    assert rows.count() >= 1
    _shot(page, "01-sensor-ticks")

    # The oldest tick (last row) was the first sweep: it says why it leased nothing.
    rows.last.get_by_text("0 runs requested").last.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Skip reason: " + reason[: reason.index("next sweep")])
    expect(dialog).to_contain_text("1 leased")
    _shot(page, "02-sensor-first-tick")


# -- runs and their tags -------------------------------------------------------


def test_runs_are_found_by_realm_and_task_id_tags(page: Any, facts: dict[str, Any]) -> None:
    orders = _table(facts, "orphaned", "sales.orders")
    run = _run(facts, "sales.orders", success=True)
    _runs_with_tag(page, "polaris/task_id", orders["task_id"])
    expect(page.get_by_role("link", name=run["run_id"][:8])).to_be_visible()
    expect(page.get_by_text(f"polaris/task_id: {orders['task_id']}").first).to_be_visible()
    expect(page.get_by_text("polaris/realm: POLARIS").first).to_be_visible()
    expect(page.get_by_text("polaris/task_type: entity_cleanup_scheduler").first).to_be_visible()
    rows = page.locator("[data-index]")  # the runs list is a virtualized table of divs
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Success")
    _shot(page, "03-runs-by-task-id")

    # Every task run of the realm: the three purged tables, the malformed
    # task's failures, the dead-lettered task.
    page.set_viewport_size({"width": 1600, "height": 2000})  # every row rendered at once
    _runs_with_tag(page, "polaris/realm", "POLARIS")
    expected = [r["run_id"] for r in facts["runs"]] + [facts["dead_task"]["run_id"]]
    for run_id in expected:
        expect(page.get_by_role("link", name=run_id[:8])).to_be_visible()
    expect(page.locator("[data-index]")).to_have_count(len(expected))
    _shot(page, "04-runs-by-realm")

    # The task a live Polaris holds was left alone: no run of it at all.
    live = _table(facts, "live")
    _runs_with_tag(page, "polaris/task_id", live["task_id"])
    expect(page.get_by_text(f"polaris/task_id={live['task_id']}").first).to_be_visible()
    expect(page.get_by_text("No matching runs")).to_be_visible()
    expect(page.locator("[data-index]")).to_have_count(0)
    _shot(page, "05-no-run-for-the-live-lease")


def test_run_page_shows_tags_what_was_deleted_and_the_lease(
    page: Any, facts: dict[str, Any]
) -> None:
    orders = _table(facts, "orphaned", "sales.orders")
    run = _run(facts, "sales.orders", success=True)
    _goto(page, f"/runs/{run['run_id']}")
    expect(page.get_by_text("Success").first).to_be_visible()

    page.get_by_role("button", name="View tags and config").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"polaris/task_id: {orders['task_id']}")
    expect(dialog).to_contain_text("polaris/realm: POLARIS")
    expect(dialog).to_contain_text("polaris/attempt: 1")
    _shot(page, "06-run-tags")
    dialog.get_by_role("button", name="OK").click()
    expect(dialog).to_have_count(0)

    # The root step: one line saying what it did (it plans; its children delete).
    _filter_logs(page, "step:run_polaris_task")
    done = page.get_by_text(
        re.compile(
            r"\(entity_cleanup_scheduler\) done: 0 file\(s\) deleted, .* freed, "
            r"0 already gone, 0 refused by the guard, \d+ child task\(s\); "
            rf"lease polaris-pipeline:run:{run['run_id']} attempt 1"
        )
    )
    expect(done).to_be_visible()
    done.scroll_into_view_if_needed()
    _shot(page, "07-run-root-step")

    # Its output metadata, opened in full as an operator would.
    _filter_logs(page, "step:run_polaris_task type:STEP_OUTPUT")
    page.get_by_role("button", name="View full message").first.click()
    message = page.get_by_role("dialog")
    expect(message).to_contain_text('Yielded output "outcome"')
    expect(message).to_contain_text(
        re.compile(
            rf"task\s*POLARIS/{orders['task_id']} 'entityCleanup_\d+'\s*realm\s*POLARIS\s*"
            rf"task id\s*{orders['task_id']}\s*type\s*entity_cleanup_scheduler\s*"
            rf"lease executor\s*polaris-pipeline:run:{run['run_id']}\s*lease attempt\s*1\s*"
            r"lease started\s*20\d\d-\d\d-\d\dT[\d:]+\+00:00\s*status\s*done\s*"
            # The step's structured record (what the run report reads), then the labels.
            r"polaris/step\s*\[Show JSON\]\s*"
            r"files deleted\s*0\s*files already gone\s*0\s*bytes freed\s*0\s*"
            r"refused paths\s*0\s*child tasks\s*[1-9]\d*"
        )
    )
    _shot(page, "08-run-output-metadata")
    message.get_by_role("button", name="Done").click()
    expect(message).to_have_count(0)

    # The children deleted the data files: the log names them.
    _filter_logs(page, "deleted (")
    data_files = page.get_by_text(re.compile(r"deleted \(all\): file:///.*/sales/orders/data/"))
    expect(data_files.first).to_be_visible()
    data_files.first.scroll_into_view_if_needed()
    _shot(page, "09-run-deleted-files")

    # The current metadata file went last, on its own, in the final stage's step.
    _filter_logs(page, "metadata.json")
    expect(
        page.get_by_text(
            re.compile(r"deleted \(all\): file:///[^,]*/sales/orders/metadata/[^,/]*\.json$")
        ).first
    ).to_be_visible()


# -- failures ------------------------------------------------------------------


def test_failed_runs_say_what_failed(page: Any, facts: dict[str, Any]) -> None:
    malformed = _run(facts, "malformed task", success=False)
    _goto(page, f"/runs/{malformed['run_id']}")
    expect(page.get_by_text("Failure").first).to_be_visible()
    _filter_logs(page, "type:STEP_FAILURE")
    expect(
        page.get_by_text(f"dagster._core.definitions.events.Failure: {malformed['error']}").first
    ).to_be_visible()
    expect(page.get_by_text("entity cleanup data is not JSON").first).to_be_visible()
    expect(page.get_by_text(facts["malformed_task_id"]).first).to_be_visible()
    _shot(page, "10-failed-run")

    dead = facts["dead_task"]
    _goto(page, f"/runs/{dead['run_id']}")
    expect(page.get_by_text("Failure").first).to_be_visible()
    _filter_logs(page, "step:run_polaris_task")
    expect(
        page.get_by_text(
            f"dagster._core.definitions.events.Failure: guard refused 1 path(s), "
            f"first '{dead['path']}'"
        ).first
    ).to_be_visible()
    expect(
        page.get_by_text(
            # The hint carries the task's own id.
            re.compile(
                r"dead-lettered after its last attempt; "
                r"`polaris-pipeline tasks requeue \d+ --realm POLARIS`"
            )
        )
    ).to_be_visible()
    expect(page.get_by_text("refused paths (sample)", exact=True)).to_be_visible()
    _shot(page, "11-dead-lettered-run")


# -- the backlog asset ---------------------------------------------------------


def test_backlog_asset_shows_counts_by_state_and_a_failing_dead_letter_check(
    page: Any, facts: dict[str, Any]
) -> None:
    backlog = facts.get("backlog")
    assert backlog, "the seed found no backlog asset (assets/backlog.py)"
    expected = {"pending": 1, "orphaned": 0, "leased": 1, "backing-off": 0, "dead": 2, "total": 4}
    assert {k: backlog["metadata"].get(k) for k in expected} == expected
    # Both dead tasks failed permanently (a payload that is not JSON, a guard
    # refusal): the failing-tasks check names them, not the dead-after-retries one.
    assert backlog["checks"]["no_failing_tasks"] is False
    assert backlog["checks"]["no_dead_tasks"] is True

    _goto(page, "/assets/polaris_task_backlog")
    expect(page.get_by_text("Latest materialization").first).to_be_visible()
    for key, value in expected.items():
        row = page.locator("tr").filter(has=page.get_by_text(key, exact=True))
        expect(row.first).to_be_visible()
        expect(row.first.locator("td").last).to_have_text(str(value))
    _shot(page, "12-backlog-asset")

    _goto(page, "/assets/polaris_task_backlog?view=checks")
    expect(page.get_by_text("Checks (5)")).to_be_visible()
    # The check list: permanent failures fail their check; the others pass.
    listing = _snapshot_once_shown(
        page,
        r"no_failing_tasks(?: no_failing_tasks)? Failed",
        r"no_dead_tasks(?: no_dead_tasks)? Succeeded",
        r"no_stale_orphans(?: no_stale_orphans)? Succeeded",
    )
    assert re.search(r"no_failing_tasks(?: no_failing_tasks)? Failed", listing), listing
    assert re.search(r"no_dead_tasks(?: no_dead_tasks)? Succeeded", listing), listing
    assert re.search(r"no_stale_orphans(?: no_stale_orphans)? Succeeded", listing), listing
    page.get_by_text("no_failing_tasks").first.click()
    expect(page.get_by_text("2 task(s) failed permanently").first).to_be_visible()
    _shot(page, "13-failing-tasks-check")


# -- the table of a run, its total, the catalog --------------------------------

_RUN_TAGS_QUERY = """
query {
  runOrError(runId: "%s") { __typename ... on Run { tags { key value } } }
}
"""


def _run_tags(base: str, run_id: str) -> dict[str, str]:
    run = _graphql(base, _RUN_TAGS_QUERY % run_id)["runOrError"]
    return {t["key"]: t["value"] for t in run.get("tags", [])}


def _wait_for_total(base: str, run_id: str) -> dict[str, str]:
    """The run report sensor tags finished runs within a few of its evaluations."""
    deadline = time.monotonic() + FIRST_TICK_S
    while time.monotonic() < deadline:
        tags = _run_tags(base, run_id)
        if "polaris/total" in tags:
            return tags
        time.sleep(1)
    pytest.fail(f"run {run_id} got no polaris/total tag within {FIRST_TICK_S} s")


def test_run_names_its_table_and_its_total_and_the_catalog_shows_the_purge(
    page: Any, facts: dict[str, Any]
) -> None:
    orders = _table(facts, "orphaned", "sales.orders")
    run = _run(facts, "sales.orders", success=True)
    tags = _wait_for_total(page.base, run["run_id"])
    assert tags["polaris/table"] == "sales.orders"
    deleted = orders["files_before"] - orders["files_after"]
    assert re.fullmatch(
        rf"{deleted} file\(s\) deleted, \d+ already gone, 0 refused, [\d.]+ KiB freed; "
        r"children: [1-9]\d* done",
        tags["polaris/total"],
    ), tags

    # Found by its table in the runs list, with the total beside it.
    _runs_with_tag(page, "polaris/table", "sales.orders")
    expect(page.get_by_role("link", name=run["run_id"][:8])).to_be_visible()
    expect(page.locator("[data-index]")).to_have_count(1)
    _goto(page, f"/runs/{run['run_id']}")
    page.get_by_role("button", name="View tags and config").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("polaris/table: sales.orders")
    expect(dialog).to_contain_text(f"polaris/total: {deleted} file(s) deleted")
    _shot(page, "14-run-table-and-total")
    dialog.get_by_role("button", name="OK").click()

    # The table's purge in the asset catalog (an asset no definition declares).
    catalog = tags["polaris/catalog_id"]
    asset = f"/assets/polaris/POLARIS/catalog_{catalog}/sales/orders"
    _goto(page, asset)
    expect(page.get_by_text("External Asset").first).to_be_visible()
    expect(page.get_by_text("Asset history").first).to_be_visible()
    _shot(page, "15-catalog-table")
    _goto(page, asset + "?view=events")
    expect(page.get_by_text("table sales.orders of realm POLARIS purged").first).to_be_visible()
    expect(page.get_by_text("files deleted", exact=True).first).to_be_visible()
    expect(page.get_by_role("link", name=run["run_id"][:8]).first).to_be_visible()
    _shot(page, "16-catalog-table-purge-event")


# -- alerts and freshness ------------------------------------------------------


def test_backlog_has_a_sweeper_freshness_check(page: Any, facts: dict[str, Any]) -> None:
    checks = facts["backlog"]["checks"]
    assert set(checks) == {
        "no_dead_tasks",
        "no_failing_tasks",
        "no_stale_orphans",
        "sweeper_is_sweeping",
    }
    # Seeded before `dagster dev` started: no sweeper had ever ticked on the instance.
    assert checks["sweeper_is_sweeping"] is False
    # Under `dagster dev` the polaris_sweeper_watch sensor reads the live sweeper's
    # state every 30 s and reports it sweeping: the check follows with no run.
    deadline = time.monotonic() + 2 * FIRST_TICK_S
    while True:
        _goto(page, "/assets/polaris_task_backlog?view=checks")
        expect(page.get_by_text("Checks (5)")).to_be_visible()
        listing = page.locator("body").aria_snapshot()
        if re.search(r"sweeper_is_sweeping(?: sweeper_is_sweeping)? Succeeded", listing):
            break
        assert time.monotonic() < deadline, f"the watch did not report the sweeper: {listing}"
        time.sleep(5)
    page.get_by_text("sweeper_is_sweeping").first.click()
    expect(page.get_by_text("allowed delay (s)").first).to_be_visible()
    _shot(page, "18-freshness-check")
