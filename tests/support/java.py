"""Iceberg's Java library as a test oracle: one JVM running tests/java/ManifestCodecJudge.

``scripts/install-iceberg-java.sh`` builds the jars and the harness into
``$PP_ICEBERG_JAVA_DIR`` (default ``~/.cache/polaris-pipeline/iceberg-java``)
and writes its class path to the ``classpath`` file there; this module only
reads that file. The JVM is started once and answers requests line by line, so
hundreds of cases cost one JVM start (about a second).

``write_iceberg_tables`` runs tests/java/spark/IcebergTableWriter, Iceberg's Java
library inside Spark 3.5, to write real tables (class path: ``spark-classpath``).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

INSTALL_SCRIPT = "scripts/install-iceberg-java.sh"
HARNESS_CLASS = "ManifestCodecJudge"
# Startup matters more than peak speed for a few hundred small requests.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss4m")


def iceberg_java_dir() -> Path:
    """Where the install script puts its output (the same default as the script's)."""
    default = Path.home() / ".cache" / "polaris-pipeline" / "iceberg-java"
    return Path(os.environ.get("PP_ICEBERG_JAVA_DIR") or default)


def java_executable() -> str | None:
    return shutil.which("java")


def iceberg_classpath() -> str:
    """The harness's class path; fails (never skips) when Java is here but the install is not."""
    listing = iceberg_java_dir() / "classpath"
    if not listing.is_file():
        pytest.fail(
            f"Java is installed but Iceberg's jars are not ({listing} is missing): "
            f"run `bash {INSTALL_SCRIPT}`"
        )
    return os.pathsep.join(line for line in listing.read_text().splitlines() if line)


class JavaJudgeError(AssertionError):
    """Iceberg's Java code refused a request; the message is the Java exception."""


class IcebergJavaJudge:
    """Requests to Iceberg's ``ManifestFiles.encode``/``decode`` in a running JVM."""

    def __init__(self, java: str, classpath: str) -> None:
        # Lives as long as the JVM, closed by close(); a pipe nobody reads could fill up.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            [java, *JVM_FLAGS, "-cp", classpath, HARNESS_CLASS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            encoding="ascii",  # the harness escapes everything else
            bufsize=1,
        )

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()

    def answers(self, requests: Sequence[str]) -> list[dict[str, Any]]:
        """One answer per request line, in order; the raw ``{"ok": ...}`` objects."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None

        if any("\n" in r or "\r" in r for r in requests):
            raise ValueError("a request is one line")

        # Written from a thread: a large batch would fill both pipes and deadlock
        # if requests were written before any answer is read.
        def write() -> None:
            for request in requests:
                stdin.write(request + "\n")
            stdin.flush()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        out = []
        for _ in requests:
            line = stdout.readline()
            if not line:
                raise RuntimeError(f"the Java harness exited: {self._stderr_tail()}")
            out.append(json.loads(line))
        writer.join()
        return out

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-4000:].decode("utf-8", "replace")

    def decode_many(self, payloads: Sequence[bytes]) -> list[dict[str, Any]]:
        """``ManifestFiles.decode`` of each payload: the ``manifest`` description or the error."""
        lines = ["decode " + base64.b64encode(p).decode("ascii") for p in payloads]
        return self.answers(lines)

    def decode(self, payload: bytes) -> dict[str, Any]:
        """The manifest Iceberg reads from ``payload``, every field by its spec name."""
        (answer,) = self.decode_many([payload])
        return _unwrap(answer)["manifest"]

    def encode_many(self, descriptions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        # ensure_ascii escapes each UTF-16 unit, which Jackson reads back exactly.
        lines = ["encode " + json.dumps(d, ensure_ascii=True) for d in descriptions]
        return self.answers(lines)

    def encode(self, description: dict[str, Any]) -> bytes:
        """``ManifestFiles.encode`` of the GenericManifestFile Iceberg builds from the fields."""
        (answer,) = self.encode_many([description])
        return base64.b64decode(_unwrap(answer)["base64"])


def _unwrap(answer: dict[str, Any]) -> dict[str, Any]:
    if not answer.get("ok"):
        raise JavaJudgeError(answer.get("error", answer))
    return answer


@contextmanager
def iceberg_java_judge() -> Iterator[IcebergJavaJudge]:
    """A running judge; skips the calling tests only when there is no ``java`` at all."""
    java = java_executable()
    if java is None:
        pytest.skip(f"no java on PATH (CI has one; locally: bash {INSTALL_SCRIPT})")
    judge = IcebergJavaJudge(java, iceberg_classpath())
    try:
        yield judge
    finally:
        judge.close()


# ---------------------------------------------------------------------------
# Real tables written by Iceberg's Java library inside Spark
# ---------------------------------------------------------------------------

WRITER_CLASS = "IcebergTableWriter"
# What Spark's own launcher opens on Java 17 (its JavaModuleOptions); without
# them Spark's off-heap and serialization code fails at start.
SPARK_JVM_FLAGS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ),
    "-Djdk.reflect.useDirectMethodHandle=false",
    "-Xmx768m",
    "-XX:+UseSerialGC",
)


@dataclass(frozen=True)
class WrittenTable:
    name: str
    location: str  # as Iceberg wrote it: file:/... (one slash)
    metadata_location: str


def write_iceberg_tables(
    warehouse: Path, tables: Sequence[tuple[str, int]], *, timeout: float = 600
) -> dict[str, WrittenTable]:
    """Write ``(name, format_version)`` tables in namespace ``db`` under ``warehouse`` with Spark.

    See tests/java/spark/IcebergTableWriter.java for what each table holds. Skips
    only when there is no ``java``.
    """
    java = java_executable()
    if java is None:
        pytest.skip(f"no java on PATH (CI has one; locally: bash {INSTALL_SCRIPT})")
    listing = iceberg_java_dir() / "spark-classpath"
    if not listing.is_file():
        pytest.fail(f"Spark's jars are not installed ({listing} is missing): run {INSTALL_SCRIPT}")
    classpath = os.pathsep.join(line for line in listing.read_text().splitlines() if line)
    specs = [f"{name}:{version}" for name, version in tables]
    done = subprocess.run(
        [java, *SPARK_JVM_FLAGS, "-cp", classpath, WRITER_CLASS, warehouse.as_uri(), *specs],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=warehouse.parent,  # Spark leaves spark-warehouse/ and similar in its directory
    )
    if done.returncode != 0:
        raise AssertionError(f"the Spark writer failed:\n{done.stderr[-6000:]}")
    out: dict[str, WrittenTable] = {}
    for line in done.stdout.splitlines():
        kind, name, location, metadata_location = line.split("\t")
        assert kind == "TABLE", line
        out[name] = WrittenTable(name, location, metadata_location)
    assert sorted(out) == sorted(name for name, _ in tables), done.stdout
    return out
