"""A Polaris-like writer for the soak: dropped pyiceberg tables and what a dying Polaris leaves.

Our own writer, kept because no Polaris server can write these rows here: its server is not
published to the registry this project installs from (docs/polaris-compatibility.md). The
children a dying Polaris writes (``polaris_children``) are held to the ones Polaris 1.4.1's
own TableCleanupTaskHandler creates (tests/test_polaris_oracle.py); the rows as stored in
PostgreSQL and the dying executor's leases (a model: 1.4.1's in-process executor writes
no lease) are what no served Polaris code produces.

Each ``PolarisWriter.step`` writes one *event* into the metastore, as a Polaris
server would, chosen by a fixed rotation (``MIX``) so that short and long runs
see the same proportions:

- ``table``: a pyiceberg table dropped with purge: its ENTITY_CLEANUP_SCHEDULER task;
  the pipeline plans its manifest and batch children inside the table's run;
- ``dead_executor``: a table whose purge a Polaris executor started and died in:
  the executor leased the parent, wrote its children (``polaris_children``: one
  MANIFEST_FILE_CLEANUP per manifest, BATCH_FILE_CLEANUP children of at most ten
  metadata-level files, in Polaris 1.4.1's order), deleted the current metadata file
  and then the parent's row (Polaris's handler returned), leased the first half of the
  children and deleted the first file of one of them, then stopped: those leases lapse
  after the lease timeout (a model: Polaris 1.4.1's executor writes no lease at all);
- ``batch``: an orphaned BATCH_FILE_CLEANUP task over five old metadata files;
- ``manifests``: a purge that died after writing its children, parent row gone:
  manifest children of three data files each and two batch children
  (``builders.orphans.orphaned_children``);
- ``hostile``: one row the pipeline must refuse, in rotation (unknown task type,
  data that is not JSON, manifest bytes that are not base64, a batch naming a
  file outside its table, which must survive, and the cleanup of a dropped
  namespace, which Polaris writes and never runs).

Every event is recorded (``Event``): its tasks' ids, the name prefix its
children carry, every file it should delete and the files that must survive.
The writer's tasks are created "now" (Polaris's clock is the database's), so
the grace period holds them back first, as it does in a deployment.

No pytest import: ``bench/soak.py`` runs it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete

from builders import tables as built_tables
from builders import tasks as built_tasks
from builders.orphans import orphaned_children, orphaned_task
from builders.tasks import dropped_entity_json, manifest_task_data
from polaris_pipeline.metastore import Metastore, new_entity_id
from polaris_pipeline.metastore.schema import entities
from polaris_pipeline.tasks.manifest_codec import manifest_ref_from_pyiceberg
from polaris_pipeline.tasks.model import NewTask, Prop, TaskType
from polaris_pipeline.tasks.payloads import (
    BatchCleanupPayload,
    ManifestCleanupPayload,
    TableIdentifier,
    batch_cleanup_task_name,
    encode_batch_cleanup,
    encode_manifest_cleanup,
    manifest_cleanup_task_name,
)

# One rotation of event kinds: 4 tables, 2 dying executors, 2 batch and 2 manifest
# orphans, 1 hostile row in every 11 events.
MIX = (
    "table",
    "batch",
    "dead_executor",
    "table",
    "manifests",
    "table",
    "batch",
    "hostile",
    "table",
    "dead_executor",
    "manifests",
)
HOSTILE_KINDS = (
    "unknown task type",
    "data not JSON",
    "base64 garbage",
    "path outside its table",
    "dropped namespace",
)
# Hostile rows Polaris writes and nobody runs: never leased, an operator discards them.
UNHANDLED_KINDS = frozenset({"dropped namespace"})
POLARIS_BATCH_SIZE = 10  # TABLE_METADATA_CLEANUP_BATCH_SIZE
NAMESPACE_TYPE_CODE = 6


@dataclass
class Event:
    """One write of the writer, and what it leaves the pipeline to do."""

    n: int
    kind: str
    created_ms: int
    task_ids: list[int]
    # Children the pipeline creates, and those a dead executor wrote, start with it.
    prefix: str
    files: list[str] = field(default_factory=list)  # URIs the cleanup must delete
    keep: list[str] = field(default_factory=list)  # paths that must survive
    hostile: str | None = None
    # Leased by a Polaris executor that died: available once this lease lapses.
    dead_lease_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "kind": self.kind,
            "created_ms": self.created_ms,
            "task_ids": self.task_ids,
            "prefix": self.prefix,
            "files": len(self.files),
            "hostile": self.hostile,
            "dead_lease_ms": self.dead_lease_ms,
        }


def _uri_path(uri: str) -> str:
    return uri.removeprefix("file://")


def _touch(directory: Path, n: int, stem: str) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = directory / f"{stem}{i:03d}-{uuid.uuid4().hex[:8]}.avro"
        path.write_bytes(b"Obj\x01 placeholder")
        out.append(f"file://{path}")
    return out


def polaris_children(table: Any, parent_name: str) -> list[tuple[str, TaskType, str]]:
    """(name, type, data) of the children Polaris 1.4.1's TableCleanupTaskHandler creates
    for ``table``, in its order: one MANIFEST per distinct manifest, then BATCH children of
    at most ten files: the metadata log first, then manifest lists, then statistics and
    partition statistics files. The current metadata file is in none: Polaris's parent
    handler deletes it itself. tests/test_polaris_oracle.py holds this to the children the
    release's own handler creates."""
    metadata = table.metadata
    io = table.io
    table_id = TableIdentifier(tuple(table.name()[:-1]), table.name()[-1])
    manifests: dict[str, Any] = {}
    manifest_lists: list[str] = []
    for snapshot in metadata.snapshots:
        manifest_lists.append(snapshot.manifest_list)
        for m in snapshot.manifests(io):
            manifests.setdefault(m.manifest_path, m)
    out: list[tuple[str, TaskType, str]] = [
        (
            manifest_cleanup_task_name(parent_name, path),
            TaskType.MANIFEST_FILE_CLEANUP,
            encode_manifest_cleanup(
                ManifestCleanupPayload(table_id, manifest_ref_from_pyiceberg(m))
            ),
        )
        for path, m in manifests.items()
    ]
    metadata_files = [
        *(e.metadata_file for e in metadata.metadata_log),
        *manifest_lists,
        *(s.statistics_path for s in metadata.statistics),
        *(s.statistics_path for s in metadata.partition_statistics),
    ]
    for files in _chunks(metadata_files, POLARIS_BATCH_SIZE):
        data = encode_batch_cleanup(BatchCleanupPayload(table_id, tuple(files)))
        out.append((batch_cleanup_task_name(parent_name, files), TaskType.BATCH_FILE_CLEANUP, data))
    return out


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class PolarisWriter:
    """Writes events into ``store`` under ``root``; see the module docstring."""

    def __init__(self, store: Metastore, root: Path, realm: str = "POLARIS") -> None:
        self.store = store
        self.realm = realm
        self.root = root
        self.warehouse = root / "wh"
        self.catalog = built_tables.open_catalog(
            built_tables.local_warehouse_uri(self.warehouse), root / "catalog.db", name="soak"
        )
        self.events: list[Event] = []
        self._hostile_count = 0

    # -- the events ------------------------------------------------------------------

    def step(self) -> Event:
        """Write the next event of the rotation; returns it."""
        n = len(self.events)
        kind = MIX[n % len(MIX)]
        event = getattr(self, f"_{kind}")(n)
        self.events.append(event)
        return event

    def _build(self, n: int) -> Any:
        # Shapes vary with n: partitioned, delete files, statistics, one or two appends.
        return built_tables.build_table(
            self.catalog,
            ("ns", f"t{n:05d}"),
            partitioned=n % 3 == 0,
            with_deletes=n % 4 == 1,
            with_statistics=n % 5 == 2,
            appends=1 + n % 2,
        )

    def _table(self, n: int) -> Event:
        table = self._build(n)
        files = sorted(built_tables.list_files(table.location()))
        task = built_tasks.drop_table_task(table, realm_id=self.realm)
        self.store.insert_tasks([task])
        return Event(n, "table", self.store.now_ms(), [task.id], task.name, files)

    def _dead_executor(self, n: int) -> Event:
        table = self._build(n)
        files = sorted(built_tables.list_files(table.location()))
        parent = built_tasks.drop_table_task(table, realm_id=self.realm)
        executor = f"polaris-soak-executor-{n}-{uuid.uuid4().hex[:8]}"
        children = self._polaris_children(table, parent.name)
        now = self.store.now_ms()
        half = len(children) // 2
        leased = [
            NewTask(
                realm_id=c.realm_id,
                id=c.id,
                name=c.name,
                properties={
                    **c.properties,
                    Prop.EXECUTOR: executor,
                    Prop.START_TIME: str(now),
                    Prop.ATTEMPT_COUNT: "1",
                },
                internal_properties=c.internal_properties,
            )
            for c in children[:half]
        ]
        # Polaris's order: the parent is written (and leased at once by its executor),
        # the handler writes the children, the parent's row goes when it returns.
        self.store.insert_tasks(
            [
                NewTask(
                    realm_id=parent.realm_id,
                    id=parent.id,
                    name=parent.name,
                    properties={
                        **parent.properties,
                        Prop.EXECUTOR: executor,
                        Prop.START_TIME: str(now),
                        Prop.ATTEMPT_COUNT: "1",
                    },
                    internal_properties=parent.internal_properties,
                )
            ]
        )
        self.store.insert_tasks([*leased, *children[half:]])
        # Its handler deletes the current metadata file itself, then returns: the row goes.
        Path(_uri_path(table.metadata_location)).unlink(missing_ok=True)
        with self.store.engine.begin() as conn:
            conn.execute(
                delete(entities).where(
                    entities.c.realm_id == self.realm, entities.c.id == parent.id
                )
            )
        # It started one leased batch child: its first file is gone when it dies.
        started = next(
            (c for c in leased if c.properties[Prop.TASK_TYPE] == TaskType.BATCH_FILE_CLEANUP.code),
            None,
        )
        if started is not None:
            first = json.loads(started.properties[Prop.DATA])["batchFiles"][0]
            Path(_uri_path(first)).unlink(missing_ok=True)
        return Event(
            n,
            "dead_executor",
            now,
            [c.id for c in children],
            parent.name,
            files,
            dead_lease_ms=now,
        )

    def _polaris_children(self, table: Any, parent_name: str) -> list[NewTask]:
        """The children Polaris's TableCleanupTaskHandler writes for ``table``."""
        return [
            self._orphan(name, task_type, data, table.location())
            for name, task_type, data in polaris_children(table, parent_name)
        ]

    def _orphan(self, name: str, task_type: TaskType, data: str, location: str) -> NewTask:
        return orphaned_task(self.realm, name, task_type, data, location, self.store.now_ms())

    def _batch(self, n: int) -> Event:
        location = self.warehouse / "ns" / f"b{n:05d}"
        files = _touch(location / "metadata", 5, "old")
        parent = f"entityCleanup_{new_entity_id()}"
        data = encode_batch_cleanup(
            BatchCleanupPayload(TableIdentifier(("ns",), f"b{n:05d}"), tuple(files))
        )
        task = self._orphan(
            batch_cleanup_task_name(parent, files),
            TaskType.BATCH_FILE_CLEANUP,
            data,
            f"file://{location}",
        )
        self.store.insert_tasks([task])
        return Event(n, "batch", self.store.now_ms(), [task.id], parent, files)

    def _manifests(self, n: int) -> Event:
        table = f"m{n:05d}"
        tasks = orphaned_children(self.realm, self.warehouse, table, 5, self.store.now_ms())
        self.store.insert_tasks(tasks)
        files = sorted(built_tables.list_files(f"file://{self.warehouse}/ns/{table}"))
        prefix = tasks[0].name.split("_file://", 1)[0]
        return Event(n, "manifests", self.store.now_ms(), [t.id for t in tasks], prefix, files)

    def _hostile(self, n: int) -> Event:
        kind = HOSTILE_KINDS[self._hostile_count % len(HOSTILE_KINDS)]
        self._hostile_count += 1
        location = self.warehouse / "ns" / f"h{n:05d}"
        keep: list[str] = []
        internal = {"storageLocation": f"file://{location}"}
        if kind == "unknown task type":
            props = {Prop.TASK_TYPE: "9", Prop.DATA: "{}"}
        elif kind == "data not JSON":
            props = {Prop.TASK_TYPE: "1", Prop.DATA: "{oops"}
        elif kind == "base64 garbage":
            props = {Prop.TASK_TYPE: "2", Prop.DATA: manifest_task_data("!!!not-base64")}
        elif kind == "path outside its table":
            outside = _touch(self.warehouse / "ns" / f"neighbour{n:05d}" / "data", 1, "keep")
            keep = [_uri_path(u) for u in outside]
            data = encode_batch_cleanup(
                BatchCleanupPayload(TableIdentifier(("ns",), f"h{n:05d}"), tuple(outside))
            )
            props = {Prop.TASK_TYPE: TaskType.BATCH_FILE_CLEANUP.code, Prop.DATA: data}
        else:  # a dropped namespace: an entity that is not a table
            # Compact, as Polaris's Jackson writes it: the form the pipeline recognises
            # as unhandled without decoding (any other form goes to the decoder).
            entity = json.loads(dropped_entity_json(typeCode=NAMESPACE_TYPE_CODE, name=f"ns{n}"))
            props = {
                Prop.TASK_TYPE: TaskType.ENTITY_CLEANUP_SCHEDULER.code,
                Prop.DATA: json.dumps(entity, separators=(",", ":")),
            }
        task = NewTask(
            realm_id=self.realm,
            id=new_entity_id(),
            name=f"entityCleanup_hostile_{n}_{uuid.uuid4().hex[:8]}",
            properties=props,
            internal_properties=internal,
        )
        self.store.insert_tasks([task])
        return Event(
            n, "hostile", self.store.now_ms(), [task.id], task.name, keep=keep, hostile=kind
        )

    # -- what is left ----------------------------------------------------------------

    def files_left(self, event: Event) -> list[str]:
        return [u for u in event.files if os.path.exists(_uri_path(u))]

    def kept_missing(self, event: Event) -> list[str]:
        return [p for p in event.keep if not os.path.exists(p)]


def wait_until(deadline: float) -> None:
    """Sleep until ``deadline`` (time.monotonic()), if it is ahead."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)
