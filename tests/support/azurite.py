"""Azurite (Microsoft's Azure Storage emulator, npm package ``azurite``) on 127.0.0.1.

``scripts/install-storage-emulators.sh`` installs it under ``.cache/``; the tests
that need it are skipped with the reason when it is missing.

- ``azurite`` (module): the running blob service, as an :class:`Azurite`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from builders.ports import free_port
from tests.support.s3 import stop_process, wait_http

ROOT = Path(__file__).resolve().parents[2]
AZURITE_BLOB = ROOT / ".cache" / "storage-emulators" / "node_modules" / ".bin" / "azurite-blob"

# Azurite's one built-in account, documented by Microsoft: not a secret.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@dataclass(frozen=True)
class Azurite:
    blob_endpoint: str  # http://127.0.0.1:<port>/devstoreaccount1
    debug_log: Path | None = None  # every request Azurite served, URLs with their query

    def signatures(self) -> set[str]:
        """The ``sig`` of every SAS a request presented so far, decoded: what a test
        greps for, learnt from the server rather than from the code that made it."""
        if self.debug_log is None or not self.debug_log.exists():
            return set()
        text = self.debug_log.read_text(encoding="utf-8", errors="replace")
        return {unquote(m) for m in re.findall(r"[?&]sig=([^&\s\"]+)", text)}

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def new_container(self) -> str:
        name = f"pp-{uuid.uuid4().hex[:16]}"
        self.service().create_container(name)
        return name

    def names(self, container: str) -> set[str]:
        client = self.service().get_container_client(container)
        return {b.name for b in client.list_blobs()}

    def put(self, container: str, name: str, data: bytes) -> None:
        self.service().get_blob_client(container, name).upload_blob(data, overwrite=True)

    def fsspec_options(self) -> dict[str, Any]:
        """adlfs keyword arguments with the account key (tests arrange data with it)."""
        return {"account_name": ACCOUNT, "connection_string": self.connection_string}


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    # A missing emulator fails the test: `make test` installs it, and a skip would
    # pass a suite that never reached Azure.
    if not AZURITE_BLOB.exists():
        pytest.fail("azurite is not installed: run scripts/install-storage-emulators.sh")
    if shutil.which("node") is None:
        pytest.fail("azurite needs node")
    port = free_port()
    # In memory: nothing to clean up; its extent files go to cwd, and so does the
    # debug log (the requests served: tests learn the SAS signatures from it).
    workdir = tempfile.mkdtemp(prefix="azurite-")
    debug_log = Path(workdir) / "debug.log"
    proc = subprocess.Popen(
        [
            str(AZURITE_BLOB),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--silent",
            "--skipApiVersionCheck",
            "--inMemoryPersistence",
            "--debug",
            str(debug_log),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=workdir,
    )
    try:
        endpoint = f"http://127.0.0.1:{port}/{ACCOUNT}"
        # Any HTTP answer (even 400 for a bare GET) means the server is up.
        wait_http(f"{endpoint}?comp=list", proc, accept_errors=True)
        yield Azurite(endpoint, debug_log)
    finally:
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)
