"""Deleting the files of a manifest on S3 (a moto server): the handler vs one request per file.

20,000 objects are uploaded to a bucket of a moto S3 server (its own process,
on 127.0.0.1). The baseline deletes them with one ``DeleteObject`` request per
key (boto3 ``delete_object`` in a loop, as a per-file ``FileIO.deleteFile``
does). Then the same objects are uploaded again, a real Iceberg manifest naming
them is written with pyiceberg's ``write_manifest`` and stored next to them, and
the MANIFEST_FILE_CLEANUP handler (``run_manifest_cleanup`` through a
``CleanupContext``) deletes them.

Requests are counted twice: on the client (botocore's ``before-send`` event, on
boto3's client and on the aiobotocore client s3fs uses) and on the server
(moto's request log, one line per request).
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench.report import TIMES, BenchResult, Figure, fmt
from builders.manifests import data_file_paths, write_with_pyiceberg

TITLE = "5. Deleting a manifest's files on S3 (moto)"
FULL = {"objects": 20_000}
QUICK = {"objects": 2_000}
KEY = "bench-access-key"
SECRET = "bench-secret-key"
REGION = "us-east-1"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours the lines of non-200 answers
_LOG_LINE = re.compile(r'"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP/[\d.]+" (\d{3})')


class MotoServer:
    """``python -m moto.server`` in a subprocess; its request log is kept in a file."""

    def __init__(self, workdir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "moto.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("moto server did not start")

    def log_size(self) -> int:
        self._log.flush()
        return self.log_path.stat().st_size

    def requests_since(self, offset: int) -> Counter[str]:
        """Requests the server logged after byte ``offset`` of its log, by method."""
        time.sleep(0.3)  # the server writes its log line after the response
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            text = _ANSI.sub("", f.read().decode("utf-8", "replace"))
        found: Counter[str] = Counter()
        for m in _LOG_LINE.finditer(text):
            method, path = m.group(1), m.group(2)
            found[f"{method} ?delete" if method == "POST" and "delete" in path else method] += 1
        return found

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def _client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name=REGION,
        config=Config(max_pool_connections=32, retries={"max_attempts": 3, "mode": "standard"}),
    )


class RequestCounter:
    """botocore ``before-send`` handler: one call per HTTP request actually sent."""

    def __init__(self) -> None:
        self.by_operation: Counter[str] = Counter()

    def __call__(self, request: Any = None, **kwargs: Any) -> None:
        name = kwargs.get("event_name", "")
        self.by_operation[name.rsplit(".", 1)[-1] or "request"] += 1
        # Returning None lets the request go out.

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())


def _upload(client: Any, bucket: str, keys: list[str]) -> float:
    t0 = time.perf_counter()
    body = b"PAR1" + b"\0" * 60 + b"PAR1"
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))
    return time.perf_counter() - t0


def _count_objects(client: Any, bucket: str, prefix: str) -> int:
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        n += page.get("KeyCount", 0)
    return n


def _baseline(client: Any, bucket: str, keys: list[str]) -> dict[str, Any]:
    counter = RequestCounter()
    client.meta.events.register("before-send.s3", counter)
    t0 = time.perf_counter()
    for key in keys:
        client.delete_object(Bucket=bucket, Key=key)
    seconds = time.perf_counter() - t0
    client.meta.events.unregister("before-send.s3", counter)
    return {
        "seconds": seconds,
        "requests": counter.total,
        "by_operation": dict(counter.by_operation),
    }


def _handler(server: MotoServer, bucket: str, uris: list[str], workdir: Path) -> dict[str, Any]:
    from builders.tasks import task_row
    from polaris_pipeline.cleanup.context import CleanupContext
    from polaris_pipeline.cleanup.manifest import run_manifest_cleanup
    from polaris_pipeline.storage.config import StorageConfig, StorageRule
    from polaris_pipeline.storage.resolve import StorageResolver
    from polaris_pipeline.tasks.model import NewTask, TaskType
    from polaris_pipeline.tasks.payloads import (
        ManifestCleanupPayload,
        TableIdentifier,
        encode_manifest_cleanup,
        task_properties,
    )

    location = f"s3://{bucket}/wh/ns/t"
    local = str(workdir / "manifest.avro")
    written = write_with_pyiceberg(local, uris)
    manifest_key = f"wh/ns/t/metadata/{uuid.uuid4()}-m0.avro"
    endpoint = server.endpoint
    client = _client(endpoint)
    client.upload_file(local, bucket, manifest_key)
    manifest_uri = f"s3://{bucket}/{manifest_key}"

    payload = ManifestCleanupPayload(TableIdentifier(("ns",), "t"), written.ref(manifest_uri))
    task = task_row(
        NewTask(
            realm_id="POLARIS",
            id=1,
            name=f"entityCleanup_1_{manifest_uri}_{uuid.uuid4()}",
            properties=task_properties(
                TaskType.MANIFEST_FILE_CLEANUP, encode_manifest_cleanup(payload)
            ),
            internal_properties={"storageLocation": location},
        )
    )
    options = {
        "endpoint_url": endpoint,
        "key": KEY,
        "secret": SECRET,
        "client_kwargs": {"region_name": REGION},
    }
    config = StorageConfig(rules=(StorageRule(f"s3://{bucket}", options),))
    resolver = StorageResolver(config)
    fs, _ = resolver.filesystem(location)
    fs.connect()  # create the aiobotocore client now, so its requests can be counted
    counter = RequestCounter()
    fs.s3.meta.events.register("before-send.s3", counter)
    ctx = CleanupContext(task=task, resolver=resolver, config=config)
    mark = server.log_size()
    t0 = time.perf_counter()
    result = run_manifest_cleanup(ctx)
    seconds = time.perf_counter() - t0
    fs.s3.meta.events.unregister("before-send.s3", counter)
    server_seen = dict(server.requests_since(mark))
    return {
        "seconds": seconds,
        "requests": counter.total,
        "by_operation": dict(counter.by_operation),
        "deleted": result.deleted,
        "missing": result.missing,
        "failed": len(result.failed),
        "refused": len(result.refused),
        "notes": result.notes,
        "server": server_seen,
        "manifest_bytes": written.length,
        "manifest_left": _count_objects(client, bucket, manifest_key),
    }


@contextlib.contextmanager
def _server() -> Iterator[tuple[MotoServer, Path]]:
    with tempfile.TemporaryDirectory(prefix="pp-bench-delete-") as tmp:
        server = MotoServer(Path(tmp))
        try:
            yield server, Path(tmp)
        finally:
            server.stop()


def run(quick: bool = False) -> BenchResult:
    n = (QUICK if quick else FULL)["objects"]
    result = BenchResult(
        name="delete",
        title=TITLE,
        command="python -m bench delete" + (" --quick" if quick else ""),
        scale="quick" if quick else "full",
        params={
            "objects": f"{n:,} (68 bytes each), in one bucket, under the table location",
            "S3": "moto server (`python -m moto.server`) in its own process on 127.0.0.1",
            "baseline": "boto3 `delete_object` per key, sequentially",
            "ours": "`run_manifest_cleanup` on a pyiceberg-written v2 manifest naming the objects",
        },
    )
    with _server() as (server, workdir):
        client = _client(server.endpoint)
        bucket = f"pp-bench-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        location = f"s3://{bucket}/wh/ns/t"
        uris = list(data_file_paths(location, n))
        keys = [u[len(f"s3://{bucket}/") :] for u in uris]
        data_prefix = "wh/ns/t/data/"

        up1 = _upload(client, bucket, keys)
        assert _count_objects(client, bucket, data_prefix) == n
        print(f"  uploaded {n:,} objects in {up1:.1f} s", flush=True)
        mark = server.log_size()
        base = _baseline(client, bucket, keys)
        base["server"] = dict(server.requests_since(mark))
        base["left"] = _count_objects(client, bucket, data_prefix)
        print(
            f"  baseline: {base['seconds']:.1f} s, {base['requests']:,} requests "
            f"(server saw {base['server']}), {base['left']} left",
            flush=True,
        )

        up2 = _upload(client, bucket, keys)
        assert _count_objects(client, bucket, data_prefix) == n
        print(f"  uploaded {n:,} objects again in {up2:.1f} s", flush=True)
        ours = _handler(server, bucket, uris, workdir)
        ours["left"] = _count_objects(client, bucket, data_prefix)
        print(
            f"  handler: {ours['seconds']:.2f} s, {ours['requests']:,} requests "
            f"(server saw {ours['server']}), deleted {ours['deleted']:,}, {ours['left']} left",
            flush=True,
        )

    ours_rate = n / ours["seconds"]
    base_rate = n / base["seconds"]
    ratio = ours_rate / base_rate
    # The handler also deletes the manifest itself: n + 1 deletions.
    ok = (
        ours["left"] == 0
        and ours["manifest_left"] == 0
        and base["left"] == 0
        and ours["deleted"] == n + 1
        and ours["failed"] == 0
    )
    speed = Figure(
        "objects deleted per second",
        ours_rate,
        "objects/s",
        baseline=base_rate,
        ratio=ratio,
        target=f"≥ 20{TIMES} faster",
        met=ratio >= 20 and ok,
    )
    if not speed.met:
        speed.why = f"ratio {ratio:.1f}{TIMES}" if ok else "not every object was deleted: see below"
    result.add(
        speed,
        Figure(
            f"wall time for {n:,} objects",
            ours["seconds"],
            "s",
            baseline=base["seconds"],
            ratio=base["seconds"] / ours["seconds"],
        ),
        Figure(
            "S3 requests sent",
            ours["requests"],
            "",
            baseline=base["requests"],
            ratio=base["requests"] / max(1, ours["requests"]),
            why="ratio = baseline / ours; ours includes reading the manifest and deleting it",
        ),
        Figure(
            "objects left afterwards (and the manifest, for ours)",
            ours["left"] + ours["manifest_left"],
            "",
            baseline=base["left"],
            target="0",
            met=ours["left"] + ours["manifest_left"] == 0 and base["left"] == 0,
        ),
    )
    rows = [
        "| side | seconds | objects/s | requests (client) | by operation (client) | "
        "requests (server log) |",
        "|---|---:|---:|---:|---|---|",
    ]
    for label, r in (
        ("baseline: delete_object per key", base),
        ("ours: run_manifest_cleanup", ours),
    ):
        rows.append(
            f"| {label} | {r['seconds']:.2f} | {fmt(n / r['seconds'])} | {r['requests']:,} | "
            f"{', '.join(f'{k} {v:,}' for k, v in sorted(r['by_operation'].items()))} | "
            f"{', '.join(f'{k} {v:,}' for k, v in sorted(r['server'].items()))} |"
        )
    result.section(
        "Runs",
        "\n".join(rows)
        + f"\n\nHandler result: {ours['deleted']:,} deleted, {ours['missing']:,} missing, "
        f"{ours['failed']} failed, {ours['refused']} refused; manifest "
        f"{ours['manifest_bytes']:,} bytes ({n:,} entries, written by pyiceberg), "
        f"{'deleted' if ours['manifest_left'] == 0 else 'still there'} afterwards. "
        f"Uploads (not timed): {up1:.1f} s and {up2:.1f} s with 32 threads.",
    )
    result.section(
        "Method",
        "The server is moto's own (`python -m moto.server`), so request parsing, XML and "
        "signing are real; it runs in a separate process, on the same 2 cores as the client. "
        "The baseline is timed from the first `delete_object` to the last; the handler from "
        "the call of `run_manifest_cleanup` to its return, which includes checking that the "
        "manifest exists, reading it (through s3fs), the guard check of every path, one "
        "`DeleteObjects` request per 1,000 keys and deleting the manifest itself. Both "
        "clients are created before the clock starts. Client-side counts come from "
        "botocore's `before-send` event (one per HTTP request, retries included); "
        "server-side counts from moto's request log. Absolute rates on a real S3 endpoint "
        "differ: its latency per request is higher than a local moto's, which costs the "
        "per-key baseline once per object and the handler once per 1,000.",
    )
    if not ok:
        result.notes.append(
            f"**Check failed:** baseline left {base['left']}, handler left {ours['left']}, "
            f"handler deleted {ours['deleted']} of {n}, failed {ours['failed']}."
        )
    return result
