"""The command line's parser: every command, flag and help text of ``polaris-pipeline``.

A flag that has an environment variable has the argparse default None: its
default is written once, in the settings (``polaris_pipeline.settings``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib.metadata import version
from typing import Any, NoReturn

from polaris_pipeline.cli.argtypes import assignment as _assignment
from polaris_pipeline.cli.argtypes import text as _text
from polaris_pipeline.cli.setting_flags import add_setting
from polaris_pipeline.execution.sweep import SWEEP_BATCH_SIZE
from polaris_pipeline.metastore.ddl import LATEST_SCHEMA_VERSION, MIN_SCHEMA_VERSION
from polaris_pipeline.metastore.privileges import require_role_name
from polaris_pipeline.settings import GUARD_BOUND_ENV, URL_ENV, env_variable
from polaris_pipeline.tasks.model import TaskState


class _HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrap as usual; examples (the epilogs) keep their lines, so they paste."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("Example"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _examples(*commands: str) -> str:
    head, *rest = commands
    return "\n".join([f"Example: {head}", *(f"         {c}" for c in rest)])


class _Parser(argparse.ArgumentParser):
    """Examples keep their lines, in every (sub-)command's help; a bad argument is one
    line on stderr (the command, the argument, what it accepts) and exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# Polaris's ids and numbers are Java longs; a larger number cannot name anything, and
# SQLite refuses to bind it (OverflowError).
_LONG_MAX = 2**63 - 1


def _whole_number(lowest: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number from ``lowest`` to a Java long's largest."""
    accepts = f"{what} is a whole number from {lowest} to {_LONG_MAX}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {accepts}") from None
        if not lowest <= value <= _LONG_MAX:
            raise argparse.ArgumentTypeError(f"{text} is out of range: {accepts}")
        return value

    return parse


def _role(text: str) -> str:
    """An argparse type: a role name by the rule ``grant-role`` writes SQL with."""
    try:
        return require_role_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_ENTITY_ID = _whole_number(0, "an entity id")


def _add_metastore(p: argparse.ArgumentParser) -> None:
    add_setting(p, "metastore", "url", metavar="URL")
    # Every command that opens the metastore reads the settings: each is reachable here.
    p.add_argument(
        "--set",
        action="append",
        dest="assignments",
        metavar="SECTION.FIELD=VALUE",
        type=_assignment,
        help="any setting, named as in a YAML block and read as its variable is (a list "
        "comma-separated, a mapping JSON), e.g. --set sweeper.jitter=0.5; repeat for several; "
        "beats the environment, and a flag of its own beats it (docs/dagster.md)",
    )


def _add_realms(p: argparse.ArgumentParser, every: str = "every realm with tasks") -> None:
    add_setting(p, "metastore", "realms", metavar="REALM", default=every)


def _add_storage_config(p: argparse.ArgumentParser) -> None:
    add_setting(p, "storage", "config_path", metavar="FILE", default="no rules")


def _add_task_ref(p: argparse.ArgumentParser) -> None:
    """A command on one named task: its ID and realm, the metastore, the lease policy."""
    p.add_argument(
        "task_id",
        type=_ENTITY_ID,
        metavar="ID",
        help="the task's entity id, as `tasks list` shows it",
    )
    p.add_argument(
        "--realm",
        type=_text("a realm's name"),
        help="the task's realm, e.g. POLARIS (default: the one realm that has a task with this id)",
    )
    _add_metastore(p)
    _add_policy(p)


def _add_policy(p: argparse.ArgumentParser) -> None:
    add_setting(p, "metastore", "lease_timeout_ms", metavar="MS")
    add_setting(p, "metastore", "grace_ms", metavar="MS", default="the lease timeout")
    add_setting(p, "metastore", "max_attempts", metavar="N")
    add_setting(p, "metastore", "polaris_version", metavar="X.Y[.Z]", default="inferred per realm")


def _add_guard_bound(p: argparse.ArgumentParser) -> None:
    """A command that runs the shared-location guard's checks."""
    add_setting(p, "guard", "bound_s", metavar="SECONDS")


def _add_purge(p: argparse.ArgumentParser, *, unreferenced: bool = True) -> None:
    """A command that runs a task's purge, or ends it (restore): the storage config, the
    unreferenced files' mode, the deletion record, the guard's bound."""
    _add_storage_config(p)
    if unreferenced:
        add_setting(p, "metastore", "unreferenced")
    add_setting(p, "storage", "deletion_record", metavar="URI")
    _add_guard_bound(p)


def _add_json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as JSON (ids as strings, times as epoch ms and ISO 8601)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="polaris-pipeline",
        description="Find and finish Apache Polaris cleanup tasks that Polaris left behind. "
        f"Every command but grant-role takes --metastore URL (default ${URL_ENV}); "
        "see COMMAND --help.",
        epilog=_examples(
            "polaris-pipeline sweep --metastore sqlite:///polaris.db",
            "polaris-pipeline tasks list --metastore postgresql+psycopg://polaris@db/polaris",
        ),
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {version('polaris-pipeline')}",
        help="print the installed version and exit",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log what is done (leases, deletes, retries, failures with their traceback) "
        "to stderr, e.g. polaris-pipeline -v sweep; without it stderr has no log, and each "
        "failure is said once, in its outcome line",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = sub.add_parser(
        "init-metastore",
        help="create Polaris's metastore tables of a schema version (development and demos)",
        description="Create the tables, keys and indexes Polaris's own schema of the chosen "
        "version creates, and its version row, when there is no entities table yet. A database "
        "that already has Polaris's entities table is left as it is; one whose entities table "
        "has another shape is refused and left untouched.",
        epilog=_examples(
            "polaris-pipeline init-metastore --metastore sqlite:///polaris.db",
            "polaris-pipeline init-metastore --schema-version 4",
        ),
    )
    _add_metastore(init)
    init.add_argument(
        "--schema-version",
        type=int,
        choices=range(MIN_SCHEMA_VERSION, LATEST_SCHEMA_VERSION + 1),
        default=LATEST_SCHEMA_VERSION,
        metavar="N",
        help=f"Polaris's schema version, {MIN_SCHEMA_VERSION}..{LATEST_SCHEMA_VERSION}: "
        "1 = Polaris 1.0, 2 = 1.1, 3 = 1.2-1.3, 4 = 1.4-1.6, 5 = 1.7 and later "
        f"(default: {LATEST_SCHEMA_VERSION})",
    )

    grant = sub.add_parser(
        "grant-role",
        help="print the SQL that limits a PostgreSQL role to what the pipeline needs",
        description="Print a script that grants ROLE what the pipeline needs on Polaris's "
        "PostgreSQL metastore, with row-level security under which it reads every entity but "
        "inserts, updates and deletes TASK rows only (and inserts task events). Run it with "
        "psql as the owner of polaris_schema; it refuses, changing nothing, when another role "
        "that is not the owner would lose sight of the rows. Nothing is connected to.",
        epilog=_examples(
            "polaris-pipeline grant-role polaris_cleanup | psql -v ON_ERROR_STOP=1 polaris",
        ),
    )
    grant.add_argument(
        "role",
        metavar="ROLE",
        type=_role,
        help="the role the pipeline logs in as, e.g. polaris_cleanup",
    )

    guard = sub.add_parser(
        "guard-indexes",
        help="create the two indexes the shared-location guards look up by (opt-in)",
        description="Create, in Polaris's own database, the indexes Polaris's schema lacks "
        "and the shared-location guards look up by: live entities by location_without_scheme, "
        "and tables and views by the file name of their metadata-location. Without them every "
        "guard check reads every entity row (warned once at the first check; a check past its "
        f"bound, {GUARD_BOUND_ENV}, fails the task's attempt, retried). On "
        "PostgreSQL built CONCURRENTLY: Polaris's writes go on meanwhile; each later write of "
        "an entity maintains two more index entries. Run it as the owner of Polaris's tables "
        "(creating an index needs that), not as the pipeline's role. See docs/performance.md.",
        epilog=_examples(
            "polaris-pipeline guard-indexes --metastore postgresql+psycopg://polaris@db/polaris",
            "polaris-pipeline guard-indexes --check",
        ),
    )
    _add_metastore(guard)
    guard.add_argument(
        "--check",
        action="store_true",
        help="create nothing: list the missing indexes, exit 1 when any is missing",
    )

    tasks = sub.add_parser(
        "tasks",
        help="list, show, requeue, run and discard tasks",
        description="Inspect and manage Polaris TASK entities. See ACTION --help.",
        epilog=_examples(
            "polaris-pipeline tasks list --state dead",
            "polaris-pipeline tasks show 4711",
            "polaris-pipeline tasks requeue 4711 --realm POLARIS",
        ),
    )
    tsub = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    lst = tsub.add_parser(
        "list",
        help="list tasks with their state",
        description="List tasks: id, realm, type, table, state (pending, leased, orphaned, "
        "backing-off, dead, unhandled: a cleanup task Polaris never runs), attempts, "
        "when the task is next available (NEXT), name, "
        "executor and the cause of the last error. The table fits the terminal; --json "
        "has every field. Changes nothing.",
        epilog="Example: polaris-pipeline tasks list --realm POLARIS --state dead --json",
    )
    _add_metastore(lst)
    _add_realms(lst)
    _add_policy(lst)
    lst.add_argument(
        "--state",
        action="append",
        choices=[s.value for s in TaskState],
        help="only tasks in this state; repeat for several, e.g. --state dead --state backing-off",
    )
    _add_json(lst, "the tasks (one array)")

    show = tsub.add_parser(
        "show",
        help="show one task in full",
        description="Show one task: its state, what its payload cleans up (type, table, "
        "metadata file, manifest or number of files), its last attempt and error. "
        "Changes nothing.",
        epilog="Example: polaris-pipeline tasks show 4711 --realm POLARIS",
    )
    _add_task_ref(show)
    _add_json(show, "the task with every property")

    requeue = tsub.add_parser(
        "requeue",
        help="give a dead or backing-off task a fresh set of attempts",
        description="Reset a task's attempt count and backoff so the sweeper runs it again. "
        "A task leased right now is refused, and so is a pending one (Polaris may be running "
        "it in-process until its grace period ends) unless --force.",
        epilog=_examples(
            "polaris-pipeline tasks requeue 4711 --realm POLARIS",
            "polaris-pipeline tasks requeue 4711 --realm POLARIS --allow-shared-location",
        ),
    )
    _add_task_ref(requeue)
    requeue.add_argument(
        "--allow-shared-location",
        action="store_true",
        help="after you checked it: let this task delete its table's files although a live "
        "table or view shares its location (recorded on the task as allowSharedLocation); "
        "only for a task the shared-location guard refused",
    )
    requeue.add_argument(
        "--force",
        action="store_true",
        help="requeue a pending task (never attempted, within its grace period, which "
        "Polaris may be running in-process right now) instead of refusing it",
    )

    run = tsub.add_parser(
        "run",
        help="run one task now (and the children it creates), as an operator",
        description="Lease one task and run it now, with the children a table cleanup "
        "creates, stage by stage. An operator's act: a backing-off or dead task is retried "
        "at once with fresh attempts. A task another holder leases, or one still within "
        "Polaris's grace period, is refused and left as it is (exit 1). Print one line per "
        "task and a summary.",
        epilog=_examples(
            "polaris-pipeline tasks run 4711 --realm POLARIS",
            "polaris-pipeline tasks run 4711 --storage-config storage.yaml --json",
        ),
    )
    _add_task_ref(run)
    _add_purge(run)
    _add_json(run, "the start decision, the outcome of every task and the summary")

    discard = tsub.add_parser(
        "discard",
        help="delete unhandled tasks (cleanup tasks Polaris writes but never runs)",
        description="Delete tasks in the unhandled state: ENTITY_CLEANUP_SCHEDULER rows "
        "Polaris writes when a role, namespace, catalog or principal is dropped, which carry "
        "no files and which nothing ever runs. Only unhandled tasks are deleted, each with a "
        "compare-and-set; any other task named is refused. Deletes no files.",
        epilog=_examples(
            "polaris-pipeline tasks discard --all-unhandled --dry-run",
            "polaris-pipeline tasks discard 4711 4712 --realm POLARIS",
        ),
    )
    discard.add_argument(
        "task_ids",
        type=_ENTITY_ID,
        nargs="*",
        metavar="ID",
        help="the tasks to delete, by entity id",
    )
    discard.add_argument(
        "--all-unhandled",
        action="store_true",
        help="every unhandled task (of the --realm given), instead of IDs",
    )
    discard.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted; change nothing"
    )
    _add_realms(discard)
    _add_metastore(discard)

    restore = tsub.add_parser(
        "restore",
        help="register a dropped table again from its last metadata file, and end its purge",
        description="Check that every file the dropped table's last metadata names exists and "
        "that no live table or view overlaps its location, register the metadata file through "
        "the catalog's Iceberg REST API (registerTable), then end the task and its children "
        "and write a restore record beside the deletion records. Without a REST endpoint, "
        "print the registerTable request, Spark's register_table call and pyiceberg's call, "
        "and change nothing. OAuth2 client credentials come from "
        f"${env_variable('restore', 'client_id')} and "
        f"${env_variable('restore', 'client_secret')} (or --set restore.client_id=...).",
        epilog=_examples(
            "polaris-pipeline tasks restore 4711",
            "polaris-pipeline tasks restore 4711 --as ns.orders_restored "
            "--rest-uri https://polaris.example/api/catalog --catalog prod",
        ),
    )
    restore.add_argument(
        "--as",
        dest="new_name",
        metavar="NAMESPACE.NAME",
        type=_text("a namespace and a name"),
        help="register under this name (default: its own)",
    )
    add_setting(restore, "restore", "rest_uri", metavar="URI")
    add_setting(restore, "restore", "catalog", metavar="NAME")
    _add_task_ref(restore)
    _add_purge(restore, unreferenced=False)

    sweep = sub.add_parser(
        "sweep",
        help="lease and run every available task",
        description="Lease every orphaned task and run it (and the children table cleanup "
        "creates) until none remains; print one line per task and a summary. Exits 1 if "
        "any task failed.",
        epilog=_examples(
            "polaris-pipeline sweep --metastore sqlite:///polaris.db --dry-run",
            "polaris-pipeline sweep --metastore sqlite:///polaris.db --storage-config storage.yaml",
        ),
    )
    _add_metastore(sweep)
    _add_realms(sweep)
    _add_policy(sweep)
    _add_purge(sweep)
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="lease nothing, delete nothing: list per task what would be deleted "
        "and what the path guard would refuse (opens the metastore read-only); "
        "exits 1 when a task would fail",
    )
    sweep.add_argument(
        "--batch-size",
        type=_whole_number(1, "the number of tasks per round trip"),
        default=SWEEP_BATCH_SIZE,
        metavar="N",
        help=f"tasks leased per round trip (default {SWEEP_BATCH_SIZE})",
    )
    _add_json(sweep, "the outcome of every task and the summary (with --dry-run: the plan)")

    leaks = sub.add_parser(
        "leaks",
        help="list the table roots under the catalogs' locations that nothing owns",
        description="Walk each catalog's default-base-location and allowedLocations one "
        "directory level at a time, never into a live table, and list the table roots "
        "(a directory whose metadata/ holds Iceberg table or view metadata) that no live "
        "table, view, namespace or catalog of any realm overlaps and no task names: the "
        "files of dropped tables that no cleanup will ever delete. Per root: objects, bytes, "
        "newest object, the newest metadata's uuid and last update, and who dropped it when "
        "Polaris's events table says. Deletes nothing. Exits 1 when a listing failed "
        "(the report is then partial).",
        epilog=_examples(
            "polaris-pipeline leaks --metastore sqlite:///polaris.db --storage-config storage.yaml",
            "polaris-pipeline leaks --realm POLARIS --catalog sales --json",
            "polaris-pipeline leaks --reclaim s3://bucket/wh/ns/t --min-age-days 30",
        ),
    )
    _add_metastore(leaks)
    _add_realms(leaks, "every realm that has a catalog; a realm that has none is refused")
    add_setting(leaks, "leaks", "catalogs", metavar="NAME", default="every catalog")
    _add_storage_config(leaks)
    leaks.add_argument(
        "--reclaim",
        metavar="ROOT",
        type=_text("a root as `leaks` lists it"),
        help="delete this one reported root, e.g. --reclaim s3://bucket/wh/ns/t: checked again "
        "first (a table root under a catalog's location, no live entity overlapping it, no task "
        "naming it, its newest metadata readable and not gc.enabled=false); only objects older "
        "than --min-age-days; its metadata last, once nothing else is left",
    )
    add_setting(leaks, "leaks", "min_age_days", metavar="DAYS")
    _add_guard_bound(leaks)
    _add_json(
        leaks, "the report (per catalog: roots, not-a-table directories, errors) or the reclaim"
    )
    return parser
