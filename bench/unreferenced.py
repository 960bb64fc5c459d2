"""A dropped table's unreferenced files: listed and deleted per second on S3 (moto), and RSS.

100,000 objects (10,000 with ``--quick``) that no metadata names are uploaded
under one table prefix of a bucket on a moto S3 server (its own process on
127.0.0.1). The unreferenced phase (``unreferenced/listing.py``, behind a real
SQLite metastore's overlap check) runs over them twice: in ``report`` mode
(listing only) and in ``delete`` mode (listing, the overlap check again before
each page of 1,000, ``DeleteObjects`` per page). Beside it, in the same run,
the referenced purge's rate: the MANIFEST_FILE_CLEANUP handler deleting 20,000
objects a manifest names (``bench/delete.py``'s measurement).

Memory: 1,000,000 objects (100,000 with ``--quick``) listed in ``report`` mode
from a local directory tree (1,000 directories of 1,000 empty files: a million
objects on moto would take hours to upload), in a fresh process; its peak RSS
against the same process's RSS before listing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.delete import KEY, REGION, SECRET, _client, _handler, _server, _upload
from bench.report import BenchResult, Figure
from builders.manifests import data_file_paths

TITLE = "9. Unreferenced files of a dropped table (S3 on moto; RSS on local files)"
FULL = {"objects": 100_000, "referenced": 20_000, "rss_objects": 1_000_000}
QUICK = {"objects": 10_000, "referenced": 2_000, "rss_objects": 100_000}
SCALE_ENV = "BENCH_UNREFERENCED_OBJECTS"


def _phase(bucket: str, endpoint: str, location: str, mode: str, workdir: Path) -> dict[str, Any]:
    from builders.tasks import DropSpec, drop_task, task_row
    from polaris_pipeline.cleanup.context import CleanupContext
    from polaris_pipeline.metastore import Metastore
    from polaris_pipeline.metastore.overlap import LiveLocations
    from polaris_pipeline.storage.config import StorageConfig, StorageRule
    from polaris_pipeline.storage.resolve import StorageResolver
    from polaris_pipeline.tasks.model import NewTask, TaskType
    from polaris_pipeline.tasks.payloads import decode_dropped_entity
    from polaris_pipeline.unreferenced.listing import run_unreferenced
    from polaris_pipeline.unreferenced.mode import UnreferencedMode

    store = Metastore(f"sqlite:///{workdir}/{uuid.uuid4().hex[:6]}.db")
    store.init_schema()
    spec = DropSpec(
        namespace=("ns",),
        name="t",
        location=location,
        metadata_location=f"{location}/metadata/00009-x.metadata.json",
    )
    new: NewTask = drop_task(spec, create_timestamp=int(time.time() * 1000) + 60_000)
    task = task_row(new)
    assert task.task_type_code == TaskType.ENTITY_CLEANUP_SCHEDULER.code
    options = {
        "endpoint_url": endpoint,
        "key": KEY,
        "secret": SECRET,
        "client_kwargs": {"region_name": REGION},
    }
    config = StorageConfig(rules=(StorageRule(f"s3://{bucket}", options),))
    ctx = CleanupContext(task=task, resolver=StorageResolver(config), config=config)
    live = LiveLocations(store.engine, store.check_schema())
    t0 = time.perf_counter()
    report = run_unreferenced(
        ctx, decode_dropped_entity(task.data()), UnreferencedMode(mode), live.overlaps
    )
    seconds = time.perf_counter() - t0
    store.dispose()
    return {
        "seconds": seconds,
        "listed": report.listed,
        "deleted": report.deleted,
        "would_delete": report.would_delete,
        "error": report.error,
        "refusal": report.refusal,
        "failures": report.failures,
    }


# -- RSS: a child process lists a local tree ------------------------------------------

_RSS_CHILD = """
import resource, sys, time
from polaris_pipeline.storage.listing import list_prefix
from polaris_pipeline.storage.resolve import StorageResolver
resolver = StorageResolver()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
n = sum(len(page) for page in list_prefix(resolver, sys.argv[1]))
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(n, before, peak, seconds)
"""


def _tree(root: Path, objects: int) -> None:
    per_dir = 1000
    for d in range(max(1, objects // per_dir)):
        directory = root / "data" / f"part={d:04d}"
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(per_dir):
            fd = os.open(directory / f"{i:04d}.parquet", os.O_CREAT | os.O_WRONLY, 0o644)
            os.close(fd)


def _rss(objects: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pp-bench-unref-") as tmp:
        root = Path(tmp) / "wh" / "ns" / "t"
        t0 = time.perf_counter()
        _tree(root, objects)
        made = time.perf_counter() - t0
        out = subprocess.run(
            [sys.executable, "-c", _RSS_CHILD, f"file://{root}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
    n, before_kb, peak_kb, seconds = int(out[0]), int(out[1]), int(out[2]), float(out[3])
    return {
        "listed": n,
        "rss_before_mb": before_kb / 1024,
        "rss_peak_mb": peak_kb / 1024,
        "seconds": seconds,
        "tree_seconds": made,
    }


def run(quick: bool = False) -> BenchResult:
    sizes = dict(QUICK if quick else FULL)
    scale = "quick" if quick else "full"
    # A run scaled down (a loaded machine): BENCH_UNREFERENCED_OBJECTS=N objects on moto.
    if os.environ.get(SCALE_ENV, "").strip():
        sizes["objects"] = int(os.environ[SCALE_ENV])
        scale = f"scaled down: {sizes['objects']:,} unreferenced objects on moto"
    n, referenced_n = sizes["objects"], sizes["referenced"]
    result = BenchResult(
        name="unreferenced",
        title=TITLE,
        command="python -m bench unreferenced" + (" --quick" if quick else ""),
        scale=scale,
        params={
            "unreferenced objects": f"{n:,} (68 bytes each) under one table prefix, S3 on moto",
            "referenced purge": f"{referenced_n:,} objects named by a manifest, same server",
            "RSS": f"{sizes['rss_objects']:,} empty files in 1,000-file directories, local disk",
        },
    )
    with _server() as (server, workdir):
        client = _client(server.endpoint)
        bucket = f"pp-bench-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        location = f"s3://{bucket}/wh/ns/t"
        keys = [u[len(f"s3://{bucket}/") :] for u in data_file_paths(f"{location}/stray", n)]
        up = _upload(client, bucket, keys)
        print(f"  uploaded {n:,} unreferenced objects in {up:.1f} s", flush=True)
        listing = _phase(bucket, server.endpoint, location, "report", workdir)
        print(f"  report: listed {listing['listed']:,} in {listing['seconds']:.1f} s", flush=True)
        deleting = _phase(bucket, server.endpoint, location, "delete", workdir)
        print(
            f"  delete: listed {deleting['listed']:,}, deleted {deleting['deleted']:,} in "
            f"{deleting['seconds']:.1f} s",
            flush=True,
        )
        ref_location = f"s3://{bucket}/wh/ns/t"
        uris = list(data_file_paths(ref_location, referenced_n))
        _upload(client, bucket, [u[len(f"s3://{bucket}/") :] for u in uris])
        referenced = _handler(server, bucket, uris, workdir)
        print(
            f"  referenced purge: {referenced['deleted']:,} in {referenced['seconds']:.1f} s",
            flush=True,
        )
    rss = _rss(sizes["rss_objects"])
    print(
        f"  RSS: {rss['listed']:,} listed, {rss['rss_before_mb']:.0f} MB before, "
        f"{rss['rss_peak_mb']:.0f} MB peak",
        flush=True,
    )
    ok = deleting["deleted"] == n and listing["listed"] == n and not deleting["error"]
    referenced_rate = referenced_n / referenced["seconds"]
    result.add(
        Figure("unreferenced objects listed per second (report)", n / listing["seconds"], "/s"),
        Figure(
            "unreferenced objects listed and deleted per second (delete)",
            n / deleting["seconds"],
            "/s",
            baseline=referenced_rate,
            ratio=(n / deleting["seconds"]) / referenced_rate,
            target="same order as the referenced purge",
            met=ok and (n / deleting["seconds"]) >= referenced_rate / 10,
            why="" if ok else f"delete pass: {deleting}",
        ),
        Figure("referenced purge: objects deleted per second", referenced_rate, "/s"),
        Figure(
            f"peak RSS listing {rss['listed']:,} objects",
            rss["rss_peak_mb"],
            "MB",
            baseline=rss["rss_before_mb"],
            target="flat: within 50 MB of the process before listing",
            met=rss["rss_peak_mb"] - rss["rss_before_mb"] < 50,
        ),
    )
    result.section(
        "Method",
        __doc__ or "",
    )
    result.notes.append(
        "RSS: the child's peak (ru_maxrss) after listing against its peak before, once its "
        "imports were loaded; a listing that held the objects would add hundreds of MB"
    )
    result.notes.append(
        f"RSS measured on a local directory tree (listing {rss['listed']:,} objects took "
        f"{rss['seconds']:.1f} s), not on moto"
    )
    return result
