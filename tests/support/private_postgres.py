"""A PostgreSQL server of one test's own, which it may stop, restart or crash at will.

The machine's PostgreSQL (127.0.0.1:5432) serves every test's database at once:
restarting it fails whoever else is running. ``PrivatePostgres`` runs a second
server from the same binaries, initialised into a temporary directory as the
``postgres`` user, on a free port of 127.0.0.1 with trust authentication, so a
fault scenario can take *its* database down and leave everyone else's alone.

Needs root (to run the server as ``postgres``) and the Debian binaries under
``/usr/lib/postgresql/<version>/bin``; ``available()`` says whether they are there.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.s3 import free_port

_BIN_GLOB = "/usr/lib/postgresql/*/bin"
SERVER_USER = "postgres"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob(_BIN_GLOB), key=lambda p: int(Path(p).parent.name.split(".")[0]))
    return Path(found[-1]) if found else None


def available() -> bool:
    """Root, ``runuser`` and PostgreSQL's server binaries: what a private server needs."""
    return os.geteuid() == 0 and shutil.which("runuser") is not None and _bin_dir() is not None


class PrivatePostgres:
    """One throwaway PostgreSQL server; a context manager (removed on exit)."""

    def __init__(self, *, max_connections: int = 200) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise RuntimeError(f"no PostgreSQL binaries under {_BIN_GLOB}")
        self.bin = bin_dir
        # Outside pytest's tmp_path: that tree is root's, mode 0700, closed to the server user.
        self.root = Path(tempfile.mkdtemp(prefix="pp-private-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.max_connections = max_connections
        self.restarts = 0

    # -- lifecycle ----------------------------------------------------------------

    def _as_server_user(self, *argv: str, timeout: float = 120) -> None:
        subprocess.run(
            ["runuser", "-u", SERVER_USER, "--", *argv],
            check=True,
            timeout=timeout,
            capture_output=True,
        )

    def init(self) -> PrivatePostgres:
        shutil.chown(self.root, SERVER_USER, SERVER_USER)
        self._as_server_user(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        return self

    def start(self) -> None:
        # fsync off: the data is a test's, and a restart is what is tested, not the disk.
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            f"-c max_connections={self.max_connections} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._as_server_user(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-o", options, "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>``: ``fast`` ends every session (as a restart does),
        ``immediate`` is a crash (no shutdown checkpoint; recovery at the next start)."""
        self._as_server_user(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop"
        )  # fmt: skip

    def restart(self, down_s: float = 0.0, mode: str = "fast") -> float:
        """Stop, stay down ``down_s`` seconds, start again; returns the seconds it was down."""
        started = time.monotonic()
        self.stop(mode)
        time.sleep(down_s)
        self.start()
        self.restarts += 1
        return time.monotonic() - started

    def running(self) -> bool:
        return (
            subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
                timeout=10,
            ).returncode
            == 0
        )

    def remove(self) -> None:
        if self.running():
            with contextlib.suppress(subprocess.SubprocessError):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- addresses ----------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg 3, as the metastore connects) for ``database``."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def dagster_env(self, database: str = "postgres") -> dict[str, str]:
        """DAGSTER_PG_* for ``database`` on this server (``DaemonConfig.postgres``)."""
        return {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USERNAME": "postgres",
            "DAGSTER_PG_PASSWORD": "",
            "DAGSTER_PG_DB": database,
        }

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


__all__ = ["PrivatePostgres", "available"]
