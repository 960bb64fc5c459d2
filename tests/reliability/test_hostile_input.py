"""Scenario 6: hostile and malformed tasks, end to end through ``polaris-pipeline sweep``.

Every hostile task sits between good tasks in one table; one CLI sweep runs them all
over real files. Each hostile task must end with a clear one-line error recorded on
its own row (or, where the input is odd but harmless, finish without deleting anything
it should not); the good tasks must finish; the filesystem must lose exactly the good
tasks' files. ``tests/test_malformed_tasks.py`` covers payload decoding at unit level;
this adds real files, the CLI, both backends, and what that test lacks (truncated
metadata, a manifest file that is not Avro, path escapes, symlinks, huge and odd paths,
SQL metacharacters in realm and task names).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pytest

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.avro_bomb import write_manifest_bomb
from builders.tasks import TABLE_ID, batch_task, dropped_entity_json, manifest_task_data
from polaris_pipeline.cleanup.avro_blocks import MAX_BLOCK_BYTES
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.tasks.manifest_codec import encode_manifest_file
from polaris_pipeline.tasks.model import MAX_ERROR_LENGTH, NewTask, Prop
from polaris_pipeline.tasks.payloads import (
    ManifestCleanupPayload,
    TableIdentifier,
    encode_manifest_cleanup,
)
from tests.reliability.harness import (
    SIZES,
    RelDb,
    Scenario,
    Workers,
    list_tree,
    sweep_once,
    touch_all,
)
from tests.support.iceberg import Warehouse, table_files
from tests.support.tasks import insert_raw_task, manifest_ref

REALM = "hostile"
SQL_REALM = "'; DROP TABLE entities; --"
ODD_REALMS = [SQL_REALM, "x%_\\*", "réalm ☃ \u202e"]
SQL_NAME = "x'); DELETE FROM polaris_schema.entities; --"


@dataclass
class Case:
    name: str
    realm: str
    task_id: int
    expect: str  # "done", or a substring the recorded error must contain
    keep: list[Path] = field(default_factory=list)  # files that must survive
    doomed: list[str] = field(default_factory=list)  # URIs that must be deleted


@dataclass
class Hostile:
    store: Metastore
    root: Path
    cases: list[Case] = field(default_factory=list)

    def add(
        self,
        name: str,
        expect: str,
        properties: dict[str, str],
        *,
        location: str | None = None,
        realm: str = REALM,
        task_name: str | None = None,
        keep: list[Path] | None = None,
        doomed: list[str] | None = None,
        extra_props: dict[str, str] | None = None,
    ) -> None:
        task_id = new_entity_id()
        properties = {**properties, **(extra_props or {})}
        internal = {"storageLocation": location} if location is not None else {}
        self.store.insert_tasks(
            [
                NewTask(
                    realm,
                    task_id,
                    task_name or f"hostile_{name}_{task_id}",
                    properties,
                    internal,
                    create_timestamp=0,
                )
            ]
        )
        self.cases.append(Case(name, realm, task_id, expect, keep or [], doomed or []))

    def batch(
        self,
        name: str,
        expect: str,
        paths: list[str],
        *,
        location: str | None,
        keep: list[Path] | None = None,
        doomed: list[str] | None = None,
        realm: str = REALM,
        task_name: str | None = None,
        extra_props: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps({"tableId": TABLE_ID, "batchFiles": paths, "type": "TABLE_METADATA"})
        self.add(
            name,
            expect,
            {Prop.TASK_TYPE: "3", Prop.DATA: data},
            location=location,
            realm=realm,
            task_name=task_name,
            keep=keep,
            doomed=doomed,
            extra_props=extra_props,
        )


class Guarded(TypedDict):
    """A table location and the files outside it that must survive a hostile batch."""

    location: str
    keep: list[Path]


def _table_dir(root: Path, name: str, files: int = 2) -> tuple[Path, list[str]]:
    loc = root / "wh" / "ns" / name
    paths = [loc / "metadata" / f"f{k}.avro" for k in range(files)]
    touch_all(paths)
    return loc, [f"file://{p}" for p in paths]


def build_hostile_set(store: Metastore, root: Path, wh: Warehouse) -> Hostile:
    h = Hostile(store, root)
    outside = root / "outside"
    precious = outside / "precious.txt"
    touch_all([precious], b"precious")

    def good(
        name: str,
        realm: str = REALM,
        *,
        task_name: str | None = None,
        extra_props: dict[str, str] | None = None,
    ) -> None:
        loc, uris = _table_dir(root, name)
        h.batch(
            name,
            "done",
            uris,
            location=f"file://{loc}",
            realm=realm,
            task_name=task_name,
            doomed=uris,
            extra_props=extra_props,
        )

    good("good-first")
    # -- properties and payloads ---------------------------------------------------------
    if store.dialect == "postgresql":
        not_object: Any = "just a JSON string"
    else:
        not_object = "not json at all {"
    task_id = new_entity_id()
    insert_raw_task(
        store, REALM, task_id, "properties-not-an-object", not_object, create_timestamp=0
    )
    h.cases.append(Case("properties not a JSON object", REALM, task_id, "not a JSON object"))
    h.add("unknown task type", "unknown taskType '9'", {Prop.TASK_TYPE: "9", Prop.DATA: "{}"})
    h.add("task type huge", "unknown taskType", {Prop.TASK_TYPE: "9" * 5000, Prop.DATA: "{}"})
    h.add("missing data", "no data", {Prop.TASK_TYPE: "3"})
    h.add("data not JSON", "not JSON", {Prop.TASK_TYPE: "1", Prop.DATA: "{oops"})
    h.add("data nested 100k deep", "JSON", {Prop.TASK_TYPE: "3", Prop.DATA: "[" * 100_000})
    h.add(
        "base64 garbage",
        "base64",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data("!!!not-base64")},
    )
    good_bytes = encode_manifest_file(manifest_ref("file:///nowhere/m.avro"))
    h.add(
        "wrong magic bytes",
        "magic",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data(b"\x00\x01" + good_bytes[2:])},
    )
    h.add(
        "manifest bytes not Avro",
        "schema",
        {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data(good_bytes[:2] + b"\x00\x05hello")},
    )
    h.add(
        "missing metadata-location",
        "metadata-location",
        {Prop.TASK_TYPE: "1", Prop.DATA: dropped_entity_json(internalProperties="{}")},
        location=f"file://{root}/wh/ns/x",
    )
    # -- files that are not what they claim ----------------------------------------------
    loc, _ = _table_dir(root, "notavro", files=0)
    fake = loc / "metadata" / "snap-1-m0.avro"
    touch_all([fake], b"this is not an avro file at all" * 10)
    payload = encode_manifest_cleanup(
        ManifestCleanupPayload(TableIdentifier(("ns",), "t"), manifest_ref(f"file://{fake}"))
    )
    h.add(
        "manifest file on disk is not Avro",
        "is not an Avro file",
        {Prop.TASK_TYPE: "2", Prop.DATA: payload},
        location=f"file://{loc}",
        keep=[fake],
    )
    # A table writer's memory bomb: ~70 KB deflated, 65 MiB inflated in one block.
    loc, _ = _table_dir(root, "bomb", files=0)
    bomb = loc / "metadata" / "snap-1-m0.avro"
    bomb.parent.mkdir(parents=True, exist_ok=True)
    write_manifest_bomb(str(bomb), MAX_BLOCK_BYTES + 1024 * 1024)
    payload = encode_manifest_cleanup(
        ManifestCleanupPayload(TableIdentifier(("ns",), "t"), manifest_ref(f"file://{bomb}"))
    )
    h.add(
        "manifest file is a compressed bomb",
        f"file://{bomb} exceeds MAX_BLOCK_BYTES (67,108,864): a block inflates past it",
        {Prop.TASK_TYPE: "2", Prop.DATA: payload},
        location=f"file://{loc}",
        keep=[bomb],
    )
    cut = wh.build("cut", with_deletes=True)
    cut_files = table_files(cut)
    metadata_path = Path(cut.metadata_location.removeprefix("file://"))
    text = metadata_path.read_bytes()
    metadata_path.write_bytes(text[: len(text) // 2])
    cut_task = built_tasks.drop_table_task(cut, realm_id=REALM, create_timestamp=0)
    store.insert_tasks([cut_task])
    h.cases.append(
        Case(
            "truncated metadata JSON",
            REALM,
            cut_task.id,
            "cannot parse table metadata",
            keep=[Path(u.removeprefix("file://")) for u in cut_files],
        )
    )
    stray = wh.build("stray")
    foreign = outside / "foreign.parquet"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    built_tables._write_parquet(stray.io, f"file://{foreign}", built_tables._batch(0, 2))
    stray.add_files([f"file://{foreign}"])
    stray = wh.catalog.load_table(stray.name())
    stray_task = built_tasks.drop_table_task(stray, realm_id=REALM, create_timestamp=0)
    store.insert_tasks([stray_task])
    h.cases.append(
        Case("table whose manifest names a file outside it", REALM, stray_task.id, "done")
    )
    # -- paths that try to leave the table -----------------------------------------------
    loc, _ = _table_dir(root, "escape", files=0)
    sym = loc / "metadata"
    sym.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, loc / "link")
    guarded: Guarded = {"location": f"file://{loc}", "keep": [precious]}
    h.batch("other scheme", "other scheme", ["s3://other-bucket/wh/x.parquet"], **guarded)
    h.batch(
        "other bucket",
        "other bucket 'bucket-b'",
        ["s3://bucket-b/wh/ns/t/data/x.parquet"],
        location="s3://bucket-a/wh/ns/t",
    )
    h.batch("other directory", "outside the table location", [f"file://{precious}"], **guarded)
    h.batch("dot-dot", "'..' segment", [f"file://{loc}/../../outside/precious.txt"], **guarded)
    h.batch("symlink escape", "resolves outside", [f"file://{loc}/link/precious.txt"], **guarded)
    h.batch("the table location itself", "table location itself", [f"file://{loc}"], **guarded)
    h.batch(
        "location is the filesystem root",
        "filesystem root",
        [f"file://{precious}"],
        location="file:///",
        keep=[precious],
    )
    h.batch("no storageLocation", "no storageLocation", [f"file://{precious}"], location=None)
    h.batch("NUL byte", "NUL", [f"file://{loc}/a\x00b"], **guarded)
    h.batch("control character", "control character", [f"file://{loc}/a\nb"], **guarded)
    # -- odd but harmless: nothing may be deleted beyond the literal path ----------------
    loc, _ = _table_dir(root, "odd", files=0)
    bait = [loc / "data" / "a1.parquet", loc / "data" / "b.parquet"]
    literal = loc / "data" / "a[1].parquet"
    touch_all([*bait, literal])
    h.batch(
        "glob characters taken literally",
        "done",
        [f"file://{loc}/data/*.parquet", f"file://{literal}"],
        location=f"file://{loc}",
        keep=bait,
        doomed=[f"file://{literal}"],
    )
    h.batch(
        "percent-encoded dot-dot",
        # The one location rule refuses it (a store that decodes would read '..').
        "percent-encoded '%2e'",
        [f"file://{loc}/%2e%2e/%2e%2e/outside/precious.txt"],
        location=f"file://{loc}",
        keep=[precious],
    )
    h.batch(
        "a directory",
        "done",
        [f"file://{loc}/data"],
        location=f"file://{loc}",
        keep=bait,
    )
    h.batch(
        f"a {SIZES.long_path}-character path",
        "too long",
        [f"file://{loc}/{'a' * SIZES.long_path}"],
        location=f"file://{loc}",
        keep=bait,
    )
    good(
        "garbage attempt counters",
        extra_props={
            Prop.EXECUTOR: "ghost-executor",
            Prop.ATTEMPT_COUNT: "9" * 30,
            Prop.START_TIME: "yesterday",
        },
    )
    # -- SQL metacharacters in realm and task names --------------------------------------
    for i, realm in enumerate(ODD_REALMS):
        good(f"good-odd-realm-{i}", realm=realm)
    good("good-sql-name", task_name=SQL_NAME)
    good("good-last")
    return h


@pytest.fixture(params=["postgresql", "sqlite"])
def hostile_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        db: RelDb = request.getfixturevalue("rel_db")
        return db.url
    url = f"sqlite:///{tmp_path}/polaris.db"
    Metastore(url).init_schema()
    return url


@pytest.mark.scenario(6, "Hostile and malformed input through `polaris-pipeline sweep`")
def test_hostile_tasks_fail_alone_and_delete_nothing_wrongly(
    hostile_url: str,
    workers: Workers,
    scenario: Scenario,
    local_warehouse: Warehouse,
    tmp_path: Path,
) -> None:
    store = Metastore(hostile_url)
    root = tmp_path / "hostile"
    h = build_hostile_set(store, root, local_warehouse)
    wh_root = Path(local_warehouse.uri.removeprefix("file://"))
    before = list_tree(root) | list_tree(wh_root)
    n_rows = store.count_tasks()
    scenario.load = (
        f"{len(h.cases)} tasks ({sum(c.expect != 'done' for c in h.cases)} hostile) on "
        f"{store.dialect}, over real local files and two pyiceberg tables, one CLI sweep"
    )
    scenario.fault = "; ".join(c.name for c in h.cases if not c.name.startswith("good"))
    scenario.if_failed += [
        "Cause (very long path): `CleanupResult.error_summary` writes the first failed "
        "path in full and the error after it (which repeats the path twice), so with a "
        "10,000-character path the 2,000-character bound of `lastAttemptError` keeps only "
        "the path and drops the cause (`File name too long`); the same multi-kilobyte line "
        "goes to the CLI's output and the log at every attempt.",
        "Proposed fix: abbreviate long paths in error texts (e.g. any run of more than 160 "
        "non-blank characters cut in its middle with a count), in `error_summary` and the "
        "storage errors, so the cause survives the bound.",
    ]
    run = sweep_once(workers, hostile_url)
    after = list_tree(root) | list_tree(wh_root)
    deleted = before - after

    problems: list[str] = []
    rows = {(r.realm_id, r.id): r for r in store.list_tasks()}
    for case in h.cases:
        row = rows.get((case.realm, case.task_id))
        if case.expect == "done":
            if row is not None:
                problems.append(f"{case.name}: not done: {row.last_error or row.properties_error}")
        elif row is None:
            problems.append(f"{case.name}: row gone, expected error {case.expect!r}")
        else:
            error = row.last_error or ""
            if case.expect.lower() not in error.lower():
                problems.append(f"{case.name}: error {error[:300]!r} lacks {case.expect!r}")
            if "\n" in error or len(error) > MAX_ERROR_LENGTH:
                problems.append(f"{case.name}: error not one bounded line ({len(error)} chars)")
        for path in case.keep:
            if not os.path.lexists(path):
                problems.append(f"{case.name}: {path} was deleted")
        for uri in case.doomed:
            if os.path.lexists(uri.removeprefix("file://")):
                problems.append(f"{case.name}: {uri} was not deleted")
    doomed = {u for c in h.cases for u in c.doomed}
    wrongly = {u for u in deleted if u not in doomed and "/wh/ns/stray/" not in u}
    tracebacks = run.stderr.count("Traceback")
    scenario.losses(
        tasks_lost=sum(
            1 for c in h.cases if c.expect != "done" and (c.realm, c.task_id) not in rows
        ),
        files_wrongly_deleted=len(wrongly),
        unclear_errors=len([p for p in problems if "error" in p]),
        other_tasks_affected=len([p for p in problems if "not done" in p]),
    )
    scenario.metrics.update(
        {
            "backend": store.dialect,
            "cli_exit_code": run.code,
            "cli_seconds": round(run.seconds, 1),
            "tracebacks_in_stderr": tracebacks,
            "recorded_errors": {
                c.name: (rows[(c.realm, c.task_id)].last_error or "")[:300]
                for c in h.cases
                if (c.realm, c.task_id) in rows
            },
        }
    )
    assert run.code == 1, run.stderr[-2000:]  # some tasks failed; the sweep went on
    assert not problems, "\n".join(problems)
    scenario.check(
        "each hostile task kept its row with a clear one-line error (bounded to "
        f"{MAX_ERROR_LENGTH} chars) naming what is wrong; the good tasks around them finished"
    )
    assert not wrongly, sorted(wrongly)[:5]
    scenario.check(
        "only the good tasks' files (and the stray table's own files) were deleted: no "
        "escape by other bucket/scheme, '..', symlink, percent-encoding, globs or directories"
    )
    stray_outside = root / "outside" / "foreign.parquet"
    refused_children = [r for r in store.list_tasks() if r.created_by_us]
    assert stray_outside.exists()
    assert refused_children and all(
        "outside the table location" in (r.last_error or "") for r in refused_children
    ), [r.last_error for r in refused_children]
    scenario.check(
        "a manifest naming a file outside its table: that file stays; the manifest child "
        "records the refusal and keeps the manifest"
    )
    assert store.count_tasks() == n_rows - sum(1 for c in h.cases if c.expect == "done") + (
        _children_left(store)
    )
    scenario.check("no row vanished except the finished ones: the SQL in names was only data")
    assert tracebacks == 0, run.stderr[-3000:]
    scenario.check("the CLI printed no traceback")


def _children_left(store: Metastore) -> int:
    """Child tasks the stray table created that remain (its refused manifest child)."""
    return sum(1 for r in store.list_tasks() if r.created_by_us)


@pytest.mark.scenario(6, "Hostile input: a batch of 100,000 paths")
def test_batch_of_a_hundred_thousand_paths(
    rel_db: RelDb, workers: Workers, scenario: Scenario, tmp_path: Path
) -> None:
    n = SIZES.big_batch
    store = Metastore(rel_db.url)
    loc = tmp_path / "wh" / "ns" / "huge"
    data = loc / "data"
    data.mkdir(parents=True)
    started = time.monotonic()
    uris = []
    for i in range(n):
        path = f"{data}/f{i:07d}.parquet"
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        uris.append(f"file://{path}")
    made_s = time.monotonic() - started
    keep = loc / "metadata" / "keep.json"
    touch_all([keep])
    outside = [f"file://{tmp_path}/elsewhere/f{i}" for i in range(n)]
    location = {"storageLocation": f"file://{loc}"}
    store.insert_tasks(
        [
            batch_task("big", uris, internal=location, create_timestamp=0),
            batch_task("refused", outside, internal=location, create_timestamp=0),
        ]
    )
    (refused_id,) = [r.id for r in store.list_tasks(["refused"])]
    scenario.load = (
        f"one BATCH_FILE_CLEANUP task naming {n} existing local files, and one naming {n} "
        "paths outside its table; one CLI sweep for each (PostgreSQL)"
    )
    scenario.fault = f"{n}-path payloads ({len(json.dumps(uris)) // 1_000_000} MB of JSON each)"
    # Not journaled: 100,000 journal lines would measure the journal, not the engine.
    existing = sweep_once(workers, rel_db.url, "--realm", "big", journal=False)
    refused = sweep_once(workers, rel_db.url, "--realm", "refused", journal=False)
    left = sum(1 for _ in data.iterdir())
    row = store.get_task("refused", refused_id)
    error = (row.last_error or "") if row else ""
    scenario.losses(
        tasks_lost=store.count_tasks(["big"]) + (0 if row is not None else 1),
        files_left_behind=left,
        files_wrongly_deleted=0 if keep.exists() else 1,
    )
    scenario.metrics.update(
        {
            "paths_per_task": n,
            "seconds_to_create_the_files": round(made_s, 1),
            "existing_files_task_cli_seconds": round(existing.seconds, 1),
            "existing_files_task_cli_peak_rss_mb": round(existing.maxrss_kb / 1024, 1),
            "refused_paths_task_cli_seconds": round(refused.seconds, 1),
            "refused_paths_task_cli_peak_rss_mb": round(refused.maxrss_kb / 1024, 1),
            "refused_task_error_chars": len(error),
        }
    )
    assert existing.code == 0, existing.stderr[-2000:]
    assert left == 0 and keep.exists() and store.count_tasks(["big"]) == 0
    scenario.check(f"all {n} files deleted, in fenced chunks; the unlisted file remains")
    assert refused.code == 1, refused.stderr[-2000:]
    assert row is not None and "guard refused" in error and len(error) <= MAX_ERROR_LENGTH
    assert str(n) in error
    scenario.check(
        f"the {n} refused paths are one bounded error on that task ('guard refused {n} "
        "path(s), first ...'), nothing deleted"
    )
    scenario.notes.append(
        "Memory grows with the number of refused paths: every refusal is kept as a "
        "GuardRefusal exception (with its traceback, about 1.4 kB each in a tracemalloc "
        "measurement) in the result and, in the CLI, in the outcome list until the sweep "
        "ends. Keeping a count plus the first few refusals would make a hostile batch of "
        "millions of outside paths cost nothing; see the peak RSS measured above."
    )
    for run in (existing, refused):
        assert run.maxrss_kb < 1_500_000 and run.seconds < 300
    scenario.check("peak memory and time stay bounded (see metrics)")
