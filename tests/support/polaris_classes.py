"""Polaris releases' own classes as a test oracle (tests/test_polaris_classes.py).

``scripts/install-polaris-classes.sh VERSION`` puts a release's jars and our harness
(tests/polaris/harness) in ``$PP_POLARIS_DIR/VERSION`` (default
``~/.cache/polaris-pipeline/polaris-classes``); :func:`install` runs it (a no-op once
done) and :class:`PolarisHarness` runs the harness: one JVM per question, each reading
the task rows of a realm from PostgreSQL with JDBC.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

INSTALL_SCRIPT = "scripts/install-polaris-classes.sh"
HARNESS_CLASS = "PolarisTaskHarness"
ORACLE_CLASS = "PolarisPurgeOracle"  # tests/polaris/oracle: where the executor is served
REPO = Path(__file__).resolve().parents[2]


def _releases() -> dict[str, tuple[int, bool]]:
    """tests/polaris/releases: each release under test, the schema it bootstraps and
    whether its BATCH payload carries ``type``."""
    table: dict[str, tuple[int, bool]] = {}
    for line in (
        (Path(__file__).resolve().parents[1] / "polaris" / "releases").read_text().splitlines()
    ):
        if line.strip() and not line.startswith("#"):
            release, schema, batch = line.split()
            table[release] = (int(schema), batch == "typed")
    return table


_RELEASE_TABLE = _releases()
SCHEMA_VERSION = {release: schema for release, (schema, _) in _RELEASE_TABLE.items()}
BATCH_TYPED = {release: typed for release, (_, typed) in _RELEASE_TABLE.items()}
RELEASES = tuple(SCHEMA_VERSION)
# Polaris's default POLARIS_TASK_TIMEOUT_MILLIS, at every release.
POLARIS_TASK_TIMEOUT_MS = 300_000
# Startup matters more than peak speed for one short run.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")


def classes_root() -> Path:
    default = Path.home() / ".cache" / "polaris-pipeline" / "polaris-classes"
    return Path(os.environ.get("PP_POLARIS_DIR") or default)


class InstallError(Exception):
    """A release could not be installed; the message is the script's one line."""


def install(release: str) -> Path:
    """The release's installed directory, installing it first when needed."""
    done = subprocess.run(
        ["bash", INSTALL_SCRIPT, release],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("install-polaris-classes:")]
        raise InstallError(lines[-1] if lines else done.stderr.strip()[-500:])
    return classes_root() / release


@dataclass(frozen=True)
class PolarisHarness:
    release: str
    directory: Path

    @property
    def runtime_service(self) -> bool:
        """Whether the release's polaris-runtime-service (the handlers' records) is here."""
        return (self.directory / "runtime-service").read_text().strip() == "served"

    def _run(
        self, *args: str, database_url: str, main: str = HARNESS_CLASS
    ) -> list[dict[str, Any]]:
        url = make_url(database_url)
        jdbc = f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database}"
        env = {**os.environ, "PGUSER": url.username or "postgres", "PGPASSWORD": url.password or ""}
        return self._java(args[0], jdbc, *args[1:], env=env, main=main)

    def _java(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        stdin: str = "",
        main: str = HARNESS_CLASS,
    ) -> list[Any]:
        java = Path((self.directory / "java-home").read_text().strip()) / "bin" / "java"
        classpath = os.pathsep.join(
            ln for ln in (self.directory / "classpath").read_text().splitlines() if ln
        )
        done = subprocess.run(
            [str(java), *JVM_FLAGS, "-cp", classpath, main, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"Polaris {self.release} harness {args[0]} failed: {done.stderr[-3000:]}"
            )
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def describe(self, database_url: str, realm: str) -> dict[int, dict[str, Any]]:
        """Per task id: what the release's TaskEntity and parseTaskState make of the row."""
        return {t["id"]: t for t in self._run("describe", realm, database_url=database_url)}

    def lease(
        self,
        database_url: str,
        realm: str,
        now_ms: int | None,
        executor: str = "polaris",
        *,
        after_ms: int = 0,
    ) -> dict[str, list[int]]:
        """Per metastore manager (transactional, atomic): the ids its loadTasks leases at
        ``now_ms``, or (None) at the JVM's own clock plus ``after_ms`` when it leases."""
        now = f"clock+{after_ms}" if now_ms is None else str(now_ms)
        out = {}
        for answer in self._run("lease", realm, now, executor, database_url=database_url):
            if "error" in answer:
                raise AssertionError(
                    f"Polaris {self.release} {answer['manager']} loadTasks: {answer['error']}"
                )
            out[answer["manager"]] = answer["leased"]
        return out

    def locations(self, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Per pair (a, b): the release's ``StorageLocation.of(a).isChildOf(of(b))``
        (``aChildOfB``), the reverse, and ``equals``; ``error`` when ``of`` refused one."""
        text = "".join(f"{a}\t{b}\n" for a, b in pairs)
        return self._java("locations", stdin=text)

    def purge(self, database_url: str, realm: str, fault: str | None = None) -> dict[str, Any]:
        """The release's own executor and handlers run every task row of ``realm``
        (tests/polaris/oracle): ``deleted`` paths, ``deleteCalls``, each task's ``runs``, the
        children Polaris ``created`` and the rows ``left``. ``fault``: ``refuse-deletes`` or
        ``stop-after=N``."""
        args = ["purge", realm, *([fault] if fault else [])]
        (answer,) = self._run(*args, database_url=database_url, main=ORACLE_CLASS)
        return dict(answer)
