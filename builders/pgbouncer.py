"""A PgBouncer of its own in front of one database, configured from ``deploy/pgbouncer/``.

The example ``pgbouncer.ini`` is used as shipped except for the lines that name
an operator's hosts and files, each replaced by what stands for it here (a
line that is no longer in the example fails loudly, so the example cannot drift
from what is tested). The pool settings, ``dagster-pool.ini``, are included
unchanged. PgBouncer refuses to run as root: as root it runs as ``postgres``.

No pytest import: ``bench/daemon_e2e.py`` uses this module too.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from builders.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = REPO_ROOT / "deploy" / "pgbouncer" / "pgbouncer.ini"
POOL_SETTINGS = REPO_ROOT / "deploy" / "pgbouncer" / "dagster-pool.ini"
_UNPRIVILEGED_USER = "postgres"
EXAMPLE_AUTH_TYPE = "md5"


@dataclass(frozen=True)
class PgBouncer:
    """A running PgBouncer: where clients connect, and as whom. ``password`` is the
    user's in auth_file: what a client gives where auth_type asks for one."""

    pid: int
    port: int
    database: str
    username: str
    password: str
    workdir: Path

    def dagster_pg_env(self) -> dict[str, str]:
        """DAGSTER_PG_* pointing Dagster's instance at PgBouncer, as the example says."""
        return {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USERNAME": self.username,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_DB": self.database,
        }

    def log(self) -> str:
        path = self.workdir / "pgbouncer.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def pool_setting(name: str) -> str:
    """A setting of ``deploy/pgbouncer/dagster-pool.ini`` as written there."""
    for line in POOL_SETTINGS.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith(";") and key.strip() == name:
            return value.strip()
    raise KeyError(f"{POOL_SETTINGS} sets no {name}")


def local_config(
    example: str,
    *,
    server: URL,
    database: str,
    port: int,
    workdir: Path,
    auth_type: str | None = None,
) -> str:
    """The example configuration with the operator's addresses and files replaced;
    ``auth_type`` replaces the example's (bench/pgbouncer_auth.py compares them)."""
    replacements = {
        "dagster = host=db.example port=5432 dbname=dagster": (
            f"{database} = host={server.host or '127.0.0.1'} port={server.port or 5432} "
            f"dbname={database}"
        ),
        "listen_port = 6432": f"listen_port = {port}",
        "auth_file = /etc/pgbouncer/userlist.txt": f"auth_file = {workdir / 'userlist.txt'}",
        "%include /etc/pgbouncer/dagster-pool.ini": f"%include {workdir / 'dagster-pool.ini'}",
    }
    if auth_type is not None:
        replacements[f"auth_type = {EXAMPLE_AUTH_TYPE}"] = f"auth_type = {auth_type}"
    lines = example.splitlines()
    for line, replacement in replacements.items():
        if line not in lines:
            raise ValueError(f"{EXAMPLE} no longer has the line {line!r}")
        example = example.replace(line, replacement)
    # The lines added below belong to [pgbouncer], which the include must end.
    if [line for line in lines if line.strip()][-1] != "%include /etc/pgbouncer/dagster-pool.ini":
        raise ValueError(f"{EXAMPLE} no longer ends with the include of the pool settings")
    # A daemon of the caller's own: no Unix socket in a shared directory, its log here.
    return example + f"\nunix_socket_dir =\nlogfile = {workdir / 'pgbouncer.log'}\n"


def _pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if found is None:
        raise RuntimeError(
            "pgbouncer is not installed: `make fast-system` (or `make system`) installs "
            "Debian's package (scripts/install-pgbouncer.sh)"
        )
    return found


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def running_pgbouncer(
    server_url: str, database: str, *, auth_type: str | None = None, timeout_s: float = 20
) -> Iterator[PgBouncer]:
    """PgBouncer on a free port of 127.0.0.1 in front of ``database`` on ``server_url``'s
    server, with a password of its own for ``server_url``'s user in auth_file;
    stopped on exit."""
    server = make_url(server_url)
    username = server.username or "postgres"
    password = secrets.token_urlsafe(16)
    port = free_port()
    as_root = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="pp_pgbouncer_") as tmp:
        workdir = Path(tmp)
        shutil.copy(POOL_SETTINGS, workdir / "dagster-pool.ini")
        (workdir / "userlist.txt").write_text(f'"{username}" "{password}"\n', encoding="utf-8")
        ini = workdir / "pgbouncer.ini"
        ini.write_text(
            local_config(
                EXAMPLE.read_text(encoding="utf-8"),
                server=server,
                database=database,
                port=port,
                workdir=workdir,
                auth_type=auth_type,
            ),
            encoding="utf-8",
        )
        user = pwd.getpwnam(_UNPRIVILEGED_USER) if as_root else None
        if user is not None:
            for path in (workdir, *workdir.iterdir()):
                os.chown(path, user.pw_uid, user.pw_gid)
        proc = subprocess.Popen(
            [_pgbouncer_binary(), str(ini)],
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        bouncer = PgBouncer(proc.pid, port, database, username, password, workdir)
        try:
            deadline = time.monotonic() + timeout_s
            while not _answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PgBouncer did not start:\n{bouncer.log()[-3000:]}")
                time.sleep(0.1)
            yield bouncer
        finally:
            proc.terminate()  # SIGTERM: immediate shutdown, server connections closed
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def server_sessions(server_url: str, database: str) -> int:
    """Sessions PostgreSQL has started on ``database`` since it was created
    (``pg_stat_database.sessions``; a backend's count is flushed when it ends)."""
    engine = create_engine(server_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            value = conn.execute(
                text("SELECT sessions FROM pg_stat_database WHERE datname = :d"), {"d": database}
            ).scalar_one()
    finally:
        engine.dispose()
    return int(value)
