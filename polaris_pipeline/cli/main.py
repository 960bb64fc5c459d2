"""``polaris-pipeline``: the operator's command line.

Errors are one clear line on stderr and a non-zero exit, never a traceback.
Exit codes: 0 success, 1 a swept task failed, 2 bad input or unreachable
services.

Settings come from the environment (``polaris_pipeline.settings``, the same
variables the Dagster code location reads); a flag overrides its variable.
Every flag's argparse default is None, so each default is written only there.

Read-only commands (``tasks list``, ``tasks show``, ``sweep --dry-run``) open
the metastore read-only: they never create or change anything.

JSON output writes ids as strings (they are 63-bit: a parser using doubles
would round them) and every time twice: ``<name>_ms`` (epoch milliseconds)
and ``<name>`` (ISO 8601, UTC).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from polaris_pipeline.cli.table import Column, output_width, render
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore import URL_ENV, Metastore
from polaris_pipeline.metastore.connection import make_engine, resolve_url
from polaris_pipeline.metastore.ddl import LATEST_SCHEMA_VERSION, MIN_SCHEMA_VERSION
from polaris_pipeline.report.formatting import (
    error_cause,
    format_bytes,
    iso_utc,
    relative_time,
    short_task_name,
    task_label,
    truncate,
)
from polaris_pipeline.settings import REALMS_ENV, PipelineSettings
from polaris_pipeline.storage.config import CONFIG_ENV_VAR
from polaris_pipeline.tasks.model import Lease, TaskRow, TaskState
from polaris_pipeline.tasks.summary import (
    PayloadSummary,
    available_at_ms,
    nothing_available_reason,
    summarize,
)

if TYPE_CHECKING:
    from polaris_pipeline.execution.runner import Runner
    from polaris_pipeline.report.totals import OutcomeTotals

EXIT_OK, EXIT_TASK_FAILED, EXIT_ERROR = 0, 1, 2


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
    """Sub-command parsers: the same help formatting as the top level."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def _add_metastore(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metastore",
        metavar="URL",
        help=f"SQLAlchemy URL of Polaris's metastore, e.g. postgresql+psycopg://user@host/polaris "
        f"or sqlite:///polaris.db (default: ${URL_ENV})",
    )


def _add_realms(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--realm",
        action="append",
        dest="realms",
        metavar="REALM",
        help="limit to this realm; repeat for several, e.g. --realm POLARIS --realm TEST "
        f"(default: ${REALMS_ENV}, else every realm with tasks)",
    )


def _add_storage_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--storage-config",
        metavar="FILE",
        help="YAML or JSON mapping location prefixes to fsspec options "
        f"(default: ${CONFIG_ENV_VAR})",
    )


def _add_task_ref(p: argparse.ArgumentParser, *, realm_optional: bool = False) -> None:
    p.add_argument(
        "task_id", type=int, metavar="ID", help="the task's entity id, as `tasks list` shows it"
    )
    if realm_optional:
        p.add_argument(
            "--realm",
            help="the task's realm, e.g. POLARIS (default: the one realm that has a task "
            "with this id)",
        )
    else:
        p.add_argument("--realm", required=True, help="the task's realm, e.g. POLARIS")


def _add_policy(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lease-timeout-ms",
        type=int,
        metavar="MS",
        help="lease period, as Polaris's POLARIS_TASK_TIMEOUT_MILLIS "
        "(default: $POLARIS_PIPELINE_LEASE_TIMEOUT_MS, else 300000)",
    )
    p.add_argument(
        "--grace-ms",
        type=int,
        metavar="MS",
        help="never-leased tasks younger than this are left to Polaris's in-process "
        "executor (default: $POLARIS_PIPELINE_GRACE_MS, else the lease timeout)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        metavar="N",
        help="dead-letter a task after N attempts (default: $POLARIS_PIPELINE_MAX_ATTEMPTS, "
        "else 8)",
    )


def _add_json(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as JSON (ids as strings, times as epoch ms and ISO 8601)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polaris-pipeline",
        description="Find and finish Apache Polaris cleanup tasks that Polaris left behind. "
        f"Every command takes --metastore URL (default ${URL_ENV}); see COMMAND --help.",
        epilog=_examples(
            "polaris-pipeline sweep --metastore sqlite:///polaris.db --once",
            "polaris-pipeline tasks list --metastore postgresql+psycopg://polaris@db/polaris",
        ),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log what is done (leases, deletes, retries) to stderr, e.g. polaris-pipeline -v "
        "sweep --once",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )

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
    tsub = tasks.add_subparsers(
        dest="tasks_command", required=True, metavar="ACTION", parser_class=_Parser
    )
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
    _add_task_ref(show, realm_optional=True)
    _add_metastore(show)
    _add_policy(show)
    _add_json(show, "the task with every property")

    requeue = tsub.add_parser(
        "requeue",
        help="give a dead or backing-off task a fresh set of attempts",
        description="Reset a task's attempt count and backoff so the sweeper runs it again. "
        "A task leased right now is refused.",
        epilog="Example: polaris-pipeline tasks requeue 4711 --realm POLARIS",
    )
    _add_task_ref(requeue, realm_optional=True)
    _add_metastore(requeue)
    _add_policy(requeue)

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
    _add_task_ref(run, realm_optional=True)
    _add_metastore(run)
    _add_policy(run)
    _add_storage_config(run)
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
        "task_ids", type=int, nargs="*", metavar="ID", help="the tasks to delete, by entity id"
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

    sweep = sub.add_parser(
        "sweep",
        help="lease and run every available task",
        description="Lease every orphaned task and run it (and the children table cleanup "
        "creates) until none remains; print one line per task and a summary. Exits 1 if "
        "any task failed.",
        epilog=_examples(
            "polaris-pipeline sweep --metastore sqlite:///polaris.db --once --dry-run",
            "polaris-pipeline sweep --metastore sqlite:///polaris.db "
            "--storage-config storage.yaml --once",
        ),
    )
    _add_metastore(sweep)
    _add_realms(sweep)
    _add_policy(sweep)
    _add_storage_config(sweep)
    sweep.add_argument(
        "--once",
        action="store_true",
        help="sweep until nothing is available, then exit (the only mode: the "
        "Dagster sensor is the long-running sweeper)",
    )
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="lease nothing, delete nothing: list per task what would be deleted "
        "and what the path guard would refuse (opens the metastore read-only)",
    )
    sweep.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="tasks leased per round trip (default 32)",
    )
    _add_json(sweep, "the outcome of every task and the summary (with --dry-run: the plan)")
    return parser


# -- settings and the metastore ----------------------------------------------------------


def settings_for(args: argparse.Namespace) -> PipelineSettings:
    """The environment's settings with this command's flags on top."""
    return PipelineSettings.from_env().with_overrides(
        metastore_url=getattr(args, "metastore", None),
        realms=getattr(args, "realms", None),
        lease_timeout_ms=getattr(args, "lease_timeout_ms", None),
        grace_ms=getattr(args, "grace_ms", None),
        max_attempts=getattr(args, "max_attempts", None),
        storage_config=getattr(args, "storage_config", None),
    )


def open_metastore(settings: PipelineSettings, *, read_only: bool) -> Metastore:
    """The metastore; ``read_only`` for commands that must not create or change anything."""
    if not read_only:
        return Metastore(settings.metastore_url, policy=settings.policy)
    engine = make_engine(resolve_url(settings.metastore_url), read_only=True)
    return Metastore(policy=settings.policy, engine=engine)


def find_task(
    store: Metastore, task_id: int, realm: str | None, realms: list[str] | None
) -> TaskRow:
    """The task ``task_id``: in ``realm``, else in the one realm (of ``realms``) that has it."""
    if realm is not None:
        task = store.get_task(realm, task_id)
        if task is None:
            raise PolarisPipelineError(f"no task {task_id} in realm {realm!r}")
        return task
    searched = realms if realms is not None else store.realms()
    found = [t for r in searched if (t := store.get_task(r, task_id)) is not None]
    if not found:
        where = f"realms [{', '.join(searched)}]" if searched else "any realm"
        raise PolarisPipelineError(f"no task {task_id} in {where}")
    if len(found) > 1:
        names = ", ".join(t.realm_id for t in found)
        raise PolarisPipelineError(
            f"task id {task_id} is in several realms ({names}): pass --realm"
        )
    return found[0]


# -- JSON --------------------------------------------------------------------------------


def json_id(value: int | None) -> str | None:
    """An entity id for JSON: a string, since ids use all 63 bits and doubles keep 53."""
    return None if value is None else str(value)


def _times(doc: dict[str, Any], **times: int | None) -> None:
    for key, ms in times.items():
        doc[f"{key}_ms"] = ms
        doc[key] = iso_utc(ms)


def _dump(doc: Any, out: TextIO) -> None:
    json.dump(doc, out, indent=2)
    out.write("\n")


def _summary_json(summary: PayloadSummary) -> dict[str, Any]:
    return {
        "type": summary.type,
        "table": summary.table,
        "is_view": summary.is_view,
        "entity_id": json_id(summary.entity_id),
        "metadata_location": summary.metadata_location,
        "manifest_path": summary.manifest_path,
        "batch_files": summary.batch_files,
        "problem": summary.problem,
    }


def task_json(
    task: TaskRow, state: TaskState, now_ms: int, settings: PipelineSettings
) -> dict[str, Any]:
    summary = summarize(task)
    error = task.last_error or task.properties_error
    doc: dict[str, Any] = {
        "id": json_id(task.id),
        "realm": task.realm_id,
        "type": summary.type,
        "table": summary.table,
        "name": task.name,
        "label": short_task_name(task.name),
        "state": state.value,
        "attempts": task.attempt_count,
        "max_attempts": settings.max_attempts,
        "executor": task.executor_id,
        "last_error": error,
        "last_error_cause": error_cause(error, task.realm_id, task.id, task.name) or None,
        "last_run_id": task.properties.get("lastAttemptRunId"),
        # The last failure cannot heal by retrying: dead-lettered at once.
        "permanent": task.failure_permanent,
    }
    _times(
        doc,
        available_at=available_at_ms(task, state, now_ms, settings.policy),
        next_attempt=task.next_attempt_ms,
        last_attempt_start=task.start_time_ms,
        last_attempt_end=task.end_time_ms,
        created=task.create_timestamp,
    )
    return doc


# -- commands ----------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    store = open_metastore(settings_for(args), read_only=False)
    created = store.init_schema(args.schema_version)
    found = store.check_schema()
    version = "no version row" if found is None else f"schema version {found}"
    print(
        f"{'created' if created else 'found existing'} Polaris entities table "
        f"in {store.display_url} ({version})",
        file=out,
    )
    return EXIT_OK


LIST_COLUMNS = (
    Column("ID"),
    Column("REALM", drop=3, same_is_free=True),
    # Cut only on narrow terminals, to the longest of the three names that stays whole.
    Column("TYPE", min_width=len("batch_file_cleanup")),
    Column("TABLE", min_width=8, max_width=40),
    Column("STATE"),
    Column("ATT"),
    Column("NEXT", drop=4),
    Column("NAME", min_width=12, max_width=56, drop=1),
    Column("EXECUTOR", min_width=10, max_width=40, drop=2),
    Column("LAST ERROR", min_width=12, max_width=80),
)


def _next_text(task: TaskRow, state: TaskState, now: int, settings: PipelineSettings) -> str:
    if state is TaskState.ORPHANED:
        return "now"
    return relative_time(available_at_ms(task, state, now, settings.policy), now)


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = open_metastore(settings, read_only=True)
    store.check_schema()
    now, rows = store.tasks_with_state(settings.realm_list())
    if args.state:
        rows = [(t, s) for t, s in rows if s.value in args.state]
    if args.json:
        _dump([task_json(t, s, now, settings) for t, s in rows], out)
        return EXIT_OK
    table = []
    for t, s in rows:
        summary = summarize(t)
        error = t.last_error or t.properties_error
        table.append(
            [
                str(t.id),
                t.realm_id,
                summary.type,
                summary.table or "",
                s.value,
                str(t.attempt_count),
                _next_text(t, s, now, settings),
                short_task_name(t.name),
                t.executor_id or "",
                error_cause(error, t.realm_id, t.id, t.name),
            ]
        )
    width = output_width(out)
    rendered = render(LIST_COLUMNS, table, width)
    print("\n".join(rendered.lines), file=out)
    counts = Counter(s.value for _, s in rows)
    footer = f"\n{len(rows)} task(s)" + "".join(f", {n} {k}" for k, n in sorted(counts.items()))
    print(footer, file=out)
    if rendered.hidden:
        realms = {t.realm_id for t, _ in rows}
        hidden = [
            f"REALM (all {next(iter(realms))})" if h == "REALM" and len(realms) == 1 else h
            for h in rendered.hidden
        ]
        print(
            truncate(
                f"not shown at {width} columns: {', '.join(hidden)} (--json has all)", width or 0
            ),
            file=out,
        )
    return EXIT_OK


def _show_text(
    task: TaskRow, state: TaskState, now: int, settings: PipelineSettings
) -> list[tuple[str, str]]:
    summary = summarize(task)
    lines = [
        ("task", task_label(task.realm_id, task.id, task.name)),
        ("type", summary.type + (" (a view)" if summary.is_view else "")),
    ]
    if summary.table:
        lines.append(("table", summary.table))
    if summary.entity_id is not None:
        lines.append(("dropped entity", str(summary.entity_id)))
    if summary.metadata_location:
        lines.append(("metadata", summary.metadata_location))
    if summary.manifest_path:
        lines.append(("manifest", summary.manifest_path))
    if summary.batch_files is not None:
        lines.append(("files", f"{summary.batch_files} in the batch"))
    if summary.problem:
        lines.append(("payload", f"cannot be decoded: {summary.problem}"))
    lines.append(
        ("state", f"{state.value}, {task.attempt_count} of {settings.max_attempts} attempts")
    )
    available = available_at_ms(task, state, now, settings.policy)
    if state is not TaskState.ORPHANED and available is not None:
        lines.append(("available", f"{iso_utc(available)} ({relative_time(available, now)})"))
    lines.append(
        (
            "created",
            f"{iso_utc(task.create_timestamp)} ({relative_time(task.create_timestamp, now)})",
        )
    )
    if task.executor_id:
        lines.append(("executor", task.executor_id))
    for key, ms in (("last start", task.start_time_ms), ("last end", task.end_time_ms)):
        if ms is not None:
            lines.append((key, f"{iso_utc(ms)} ({relative_time(ms, now)})"))
    run_id = task.properties.get("lastAttemptRunId")
    if run_id:
        lines.append(("last run", run_id))
    error = error_cause(task.last_error or task.properties_error, task.realm_id, task.id, task.name)
    if error:
        lines.append(("last error", error))
    if task.failure_permanent:
        lines.append(("failure", "permanent: retrying cannot heal it, dead-lettered at once"))
    return lines


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = open_metastore(settings, read_only=True)
    store.check_schema()
    task = find_task(store, args.task_id, args.realm, settings.realm_list())
    now = store.now_ms()
    state = task.state(now, store.policy)
    if args.json:
        doc = task_json(task, state, now, settings)
        doc["payload"] = _summary_json(summarize(task))
        doc["properties"] = {k: v for k, v in task.properties.items() if k != "data"}
        doc["data"] = task.properties.get("data")
        doc["internal_properties"] = task.internal_properties
        doc["entity_version"] = task.entity_version
        _dump(doc, out)
        return EXIT_OK
    width = output_width(out)
    pairs = _show_text(task, state, now, settings)
    key_width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        line = f"{key.ljust(key_width)}  {value}"
        print(truncate(line, width) if width else line, file=out)
    return EXIT_OK


def cmd_requeue(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = open_metastore(settings, read_only=False)
    store.check_schema()
    task = find_task(store, args.task_id, args.realm, settings.realm_list())
    state = store.requeue(task.realm_id, task.id)
    print(f"requeued task {task.id} in realm {task.realm_id!r}: now {state.value}", file=out)
    return EXIT_OK


def cmd_discard(args: argparse.Namespace, out: TextIO) -> int:
    from polaris_pipeline.metastore.store import DiscardOutcome

    if bool(args.task_ids) == bool(args.all_unhandled):
        raise ValueError("name the tasks to discard by ID, or pass --all-unhandled (not both)")
    settings = settings_for(args)
    store = open_metastore(settings, read_only=args.dry_run)
    store.check_schema()
    results = store.discard_unhandled(
        args.task_ids or None, settings.realm_list(), dry_run=args.dry_run
    )
    verbs = {
        DiscardOutcome.DISCARDED: "discarded",
        DiscardOutcome.WOULD_DISCARD: "would discard",
        DiscardOutcome.REFUSED: "refused",
    }
    for r in results:
        where = f"{r.realm_id}/{r.task_id}" if r.realm_id else str(r.task_id)
        name = f" {r.name!r}" if r.name else ""
        detail = f": {r.detail}" if r.detail else ""
        print(f"{verbs[r.outcome]:<14} {where}{name}{detail}", file=out)
    done = sum(r.outcome is not DiscardOutcome.REFUSED for r in results)
    refused = len(results) - done
    if args.dry_run:
        tail = f"dry run: {done} unhandled task(s) would be discarded; nothing was changed"
    else:
        tail = f"{done} unhandled task(s) discarded"
    print(f"\n{tail}" + (f"; {refused} refused" if refused else ""), file=out)
    return EXIT_ERROR if refused else EXIT_OK


class _Progress:
    """Progress of long deletes on a terminal, on one line; silent when stderr is not one."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        # The two-space indent plus the text stays one character short of the width:
        # a line that fills the terminal wraps, and \r can then no longer take it back.
        width = output_width(stream) if self.enabled else None
        self.width = max(20, width - 3) if width else None

    def _write(self, text: str) -> None:
        line = truncate(text, self.width) if self.width else text
        self.stream.write(f"\r  {line}\033[K")
        self.stream.flush()

    def __call__(self, lease: Lease, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        of = f"/{total} ({100 * done // total}%)" if total else ""
        self._write(f"{lease.realm_id}/{lease.task_id}: {what} {done}{of}")

    def status(self, text: str) -> None:
        """A transient line (overwritten by the next progress or report)."""
        if self.enabled:
            self._write(text)

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


class _NotingMetastore(Metastore):
    """The metastore, remembering what each task it reads is about.

    A finished task's row is gone by the time its outcome is reported, so the
    per-task lines take its table from here.
    """

    def __init__(self, settings: PipelineSettings) -> None:
        super().__init__(settings.metastore_url, policy=settings.policy)
        self.summaries: dict[tuple[str, int], PayloadSummary] = {}

    def get_task(self, realm_id: str, task_id: int) -> TaskRow | None:
        task = super().get_task(realm_id, task_id)
        if task is not None:
            self.summaries[(realm_id, task_id)] = summarize(task)
        return task


def _storage_config(settings: PipelineSettings) -> Any:
    from polaris_pipeline.storage.config import StorageConfig

    if settings.storage_config:
        return StorageConfig.load(settings.storage_config)
    return StorageConfig()


def _outcome_json(
    outcome: Any, role: str, parent: int | None, summary: PayloadSummary | None
) -> dict[str, Any]:
    lease = outcome.lease
    result = outcome.result
    doc: dict[str, Any] = {
        "id": json_id(lease.task_id),
        "realm": lease.realm_id,
        "label": short_task_name(lease.name),
        "name": lease.name,
        "type": summary.type if summary else None,
        "table": summary.table if summary else None,
        "role": role,
        "parent_id": json_id(parent),
        "status": outcome.status.value,
        # A permanent failure cannot heal by retrying: dead-lettered at once.
        "permanent": outcome.permanent,
        "attempt": lease.attempt,
        "error": outcome.error,
        "cause": error_cause(outcome.error, lease.realm_id, lease.task_id, lease.name) or None,
        "files_deleted": result.deleted if result else 0,
        "already_gone": result.missing if result else 0,
        "bytes_freed": result.bytes_freed if result else 0,
        "paths_refused": len(result.refused) if result else 0,
        "children": [json_id(c.task_id) for c in outcome.children],
    }
    _times(doc, next_attempt=outcome.next_attempt_ms)
    return doc


def _outcome_line(outcome: Any, summary: PayloadSummary | None, width: int | None) -> str:
    """One line per task: status, label, table, what was deleted, the error's cause.

    On a terminal too narrow for it, the task's name gives way first (the id stays
    whole), then the end of the error.
    """
    lease = outcome.lease
    head = f"{outcome.status.value:<10} {lease.realm_id}/{lease.task_id} "
    rest = ["permanent failure, not retried"] if outcome.permanent else []
    if summary and summary.table:
        rest.append(summary.table)
    result = outcome.result
    if result is not None:
        done = f"deleted {result.deleted}"
        if result.deleted:
            done += f" ({format_bytes(result.bytes_freed)})"
        if result.missing:
            done += f", {result.missing} were gone"
        if outcome.children:
            done += f", {len(outcome.children)} child task(s)"
        rest.append(done)
    if outcome.error:
        rest.append(error_cause(outcome.error, lease.realm_id, lease.task_id, lease.name))
    name = short_task_name(lease.name)
    tail = "".join(f"  {part}" for part in rest)
    if width is not None and len(head) + len(name) + len(tail) > width:
        room = width - len(head) - len(tail)
        name = truncate(name, max(room, 10))
    line = head + name + tail
    return truncate(line, width) if width is not None else line


def _counts_json(counts: Counter[str]) -> dict[str, int]:
    """``{"tasks": 4, "done": 3, "failed": 1, "dead": 0, "lease_lost": 0}``."""
    from polaris_pipeline.execution.runner import Status

    return {
        "tasks": sum(counts.values()),
        **{s.value.replace("-", "_"): counts[s.value] for s in Status},
    }


def _totals_json(totals: OutcomeTotals) -> dict[str, Any]:
    """A sweep's ``OutcomeTotals`` for ``sweep --json``."""
    return {
        **_counts_json(totals.by_status),
        "roots": _counts_json(totals.tasks),
        "children": _counts_json(totals.children),
        "files_deleted": totals.files_deleted,
        "already_gone": totals.files_missing,
        "bytes_freed": None if totals.bytes_unknown else totals.bytes_freed,
        "paths_refused": totals.refused,
    }


class _Report:
    """The per-task lines (or JSON records) and the totals of the tasks a command ran."""

    def __init__(self, noting: _NotingMetastore, out: TextIO, *, as_json: bool) -> None:
        from polaris_pipeline.report.totals import OutcomeTotals

        self.totals = OutcomeTotals()  # also knows each child's parent
        self.records: list[dict[str, Any]] = []
        self.progress = _Progress(sys.stderr)
        self._noting = noting
        self._out = out
        self._as_json = as_json
        self._width = output_width(out)

    def __call__(self, outcome: Any) -> None:
        lease = outcome.lease
        self.totals.add(outcome)
        summary = self._noting.summaries.get((lease.realm_id, lease.task_id))
        parent = self.totals.parent_of(lease.realm_id, lease.task_id)
        self.records.append(
            _outcome_json(outcome, "child" if parent is not None else "root", parent, summary)
        )
        if not self._as_json:
            self.progress.clear()
            print(_outcome_line(outcome, summary, self._width), file=self._out, flush=True)

    def summary(self, verb: str) -> None:
        print(f"\n{verb} {self.totals.tasks_text()}", file=self._out)
        print(f"  {self.totals.line()}", file=self._out)


def _runner(
    settings: PipelineSettings, noting: _NotingMetastore, report: _Report, command: str
) -> Runner:
    """The Runner of a command that runs tasks, reporting to ``report``."""
    from polaris_pipeline.execution.runner import Runner, make_executor_id

    prefix = settings.executor_prefix
    return Runner(
        noting,
        _storage_config(settings),
        executor_id=make_executor_id(command, prefix) if prefix else None,
        progress=report.progress,
        write_task_events=settings.task_events,
    )


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    noting = _NotingMetastore(settings)
    noting.check_schema()
    task = find_task(noting, args.task_id, args.realm, settings.realm_list())
    report = _Report(noting, out, as_json=args.json)
    with _runner(settings, noting, report, "run") as runner:
        # A fresh holder: nothing of its own to adopt.
        decision = runner.start(task.realm_id, task.id, operator=True, may_adopt=False)
        start = {"action": decision.action.value, "message": decision.message}
        if decision.lease is None:
            if args.json:
                _dump({"started": False, **start}, out)
            else:
                print(f"not run: {decision.message}", file=out)
            return EXIT_TASK_FAILED
        if not args.json:
            print(decision.message, file=out)
        runner.execute_tree(decision.lease, on_outcome=report)
        report.progress.clear()
    if args.json:
        totals = _totals_json(report.totals)
        _dump({"started": True, **start, **totals, "outcomes": report.records}, out)
    else:
        report.summary("ran")
    return EXIT_TASK_FAILED if report.totals.failed else EXIT_OK


def cmd_sweep(args: argparse.Namespace, out: TextIO) -> int:
    from polaris_pipeline.execution.runner import Runner

    settings = settings_for(args)
    realms = settings.realm_list()
    if args.dry_run:
        store = open_metastore(settings, read_only=True)
        store.check_schema()
        config = _storage_config(settings)
        with Runner(store, config, write_task_events=settings.task_events) as runner:
            return _dry_run(runner, store, realms, out, as_json=args.json)
    noting = _NotingMetastore(settings)
    noting.check_schema()
    report = _Report(noting, out, as_json=args.json)
    with _runner(settings, noting, report, "sweep") as runner:
        report.progress.status(f"sweeping {noting.display_url} …")
        sweep_args: dict[str, Any] = {}
        if args.batch_size is not None:
            sweep_args["batch_size"] = args.batch_size
        outcomes = runner.sweep(realms, on_outcome=report, **sweep_args)
        report.progress.clear()
    totals = report.totals
    if args.json:
        _dump({**_totals_json(totals), "outcomes": report.records}, out)
    else:
        report.summary("swept")
        if not outcomes:
            now, rows = noting.tasks_with_state(realms)
            print(nothing_available_reason(rows, now, noting.policy, realms), file=out)
    return EXIT_TASK_FAILED if totals.failed else EXIT_OK


def _dry_run(
    runner: Any, store: Metastore, realms: list[str] | None, out: TextIO, *, as_json: bool
) -> int:
    plans = runner.dry_run(realms)
    docs: list[dict[str, Any]] = []
    for task, plan in plans:
        summary = summarize(task)
        doc: dict[str, Any] = {
            "id": json_id(task.id),
            "realm": task.realm_id,
            "label": short_task_name(task.name),
            "type": summary.type,
            "table": summary.table,
        }
        if isinstance(plan, str):
            doc["error"] = error_cause(plan, task.realm_id, task.id, task.name)
        else:
            doc["would_delete"] = plan.would_delete
            doc["refused"] = [{"path": r.path, "reason": r.reason} for r in plan.refused]
            doc["notes"] = plan.notes
        docs.append(doc)
    reason = None
    if not docs:
        now, rows = store.tasks_with_state(realms)
        reason = nothing_available_reason(rows, now, store.policy, realms)
    if as_json:
        _dump({"tasks": docs, "nothing_available": reason}, out)
        return EXIT_OK
    for doc in docs:
        head = f"{doc['realm']}/{doc['id']} {doc['label']}"
        print(f"{head}  {doc['table']}" if doc["table"] else head, file=out)
        if "error" in doc:
            print(f"  error: {doc['error']}", file=out)
            continue
        for path in doc["would_delete"]:
            print(f"  delete  {path}", file=out)
        for refusal in doc["refused"]:
            print(f"  REFUSE  {refusal['path']}  ({refusal['reason']})", file=out)
        for note in doc["notes"]:
            print(f"  note    {note}", file=out)
    total = sum(len(d.get("would_delete", [])) for d in docs)
    print(
        f"\ndry run: {len(docs)} task(s), {total} file(s) would be deleted; nothing was changed",
        file=out,
    )
    if reason:
        print(reason, file=out)
    return EXIT_OK


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    stream = out or sys.stdout
    handlers = {
        ("init-metastore", None): cmd_init,
        ("tasks", "list"): cmd_list,
        ("tasks", "show"): cmd_show,
        ("tasks", "requeue"): cmd_requeue,
        ("tasks", "run"): cmd_run,
        ("tasks", "discard"): cmd_discard,
        ("sweep", None): cmd_sweep,
    }
    handler = handlers[(args.command, getattr(args, "tasks_command", None))]
    try:
        return handler(args, stream)
    except (PolarisPipelineError, ValueError) as exc:
        print(f"polaris-pipeline: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(
            "polaris-pipeline: interrupted; leases lapse after the lease timeout", file=sys.stderr
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
