"""Iceberg's own REST catalog server (``RESTCatalogServer``, Maven Central jars), started
on 127.0.0.1 for a test: a JDBC (SQLite) catalog whose file IO reads local files."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builders.ports import free_port

INSTALL_SCRIPT = "scripts/install-iceberg-rest.sh"


def _lib() -> Path:
    base = (
        os.environ.get("PP_ICEBERG_REST_DIR")
        or Path.home() / ".cache/polaris-pipeline/iceberg-rest"
    )
    return Path(base) / "lib"


@dataclass(frozen=True)
class RestServer:
    uri: str
    log: Path


@pytest.fixture
def iceberg_rest_server(tmp_path: Path) -> Iterator[RestServer]:
    """The server, up and answering ``GET /v1/config``; stopped (its process only) after."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("no java on PATH: scripts/install-system-packages.sh installs the JDK it needs")
    root = Path(__file__).resolve().parents[2]
    subprocess.run(["bash", str(root / INSTALL_SCRIPT)], check=True, capture_output=True)
    classpath = ":".join(str(p) for p in sorted(_lib().glob("*.jar")))
    port = free_port()
    env = {
        **os.environ,
        "CATALOG_REST_PORT": str(port),  # the server reads CATALOG_* as catalog properties
        "CATALOG_URI": f"jdbc:sqlite:file:{tmp_path}/rest-catalog.db",
        "CATALOG_WAREHOUSE": (tmp_path / "rest-wh").as_uri(),
        "CATALOG_JDBC_USER": "user",
        "CATALOG_JDBC_PASSWORD": "password",
    }
    log = tmp_path / "rest-server.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [java, "-cp", classpath, "org.apache.iceberg.rest.RESTCatalogServer"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/v1/config", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text()[-2000:]
                    raise RuntimeError(f"REST server did not start: {tail}") from None
                time.sleep(0.3)
        yield RestServer(uri, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
