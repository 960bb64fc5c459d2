"""``polaris-pipeline``: the operator's command line.

Errors are one clear line on stderr and a non-zero exit, never a traceback.
Exit codes: 0 success, 1 a swept task failed, 2 bad input or unreachable
services.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any, TextIO

from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.metastore import URL_ENV, Metastore
from polaris_pipeline.metastore.ddl import LATEST_SCHEMA_VERSION, MIN_SCHEMA_VERSION
from polaris_pipeline.tasks.model import Lease, LeasePolicy, TaskRow, TaskState

EXIT_OK, EXIT_TASK_FAILED, EXIT_ERROR = 0, 1, 2

EPILOG_ENV = f"The metastore URL defaults to ${URL_ENV}."


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
        "(default: every realm with tasks)",
    )


def _add_task_ref(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "task_id", type=int, metavar="ID", help="the task's entity id, as `tasks list` shows it"
    )
    p.add_argument("--realm", required=True, help="the task's realm, e.g. POLARIS")


def _add_policy(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lease-timeout-ms",
        type=int,
        default=300_000,
        metavar="MS",
        help="lease period, as Polaris's POLARIS_TASK_TIMEOUT_MILLIS (default 300000)",
    )
    p.add_argument(
        "--grace-ms",
        type=int,
        default=None,
        metavar="MS",
        help="never-leased tasks younger than this are left to Polaris's in-process "
        "executor (default: the lease timeout)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        default=8,
        metavar="N",
        help="dead-letter a task after N attempts (default 8)",
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
        help="list, show and requeue tasks",
        description="Inspect and manage Polaris TASK entities. See ACTION --help.",
        epilog=_examples(
            "polaris-pipeline tasks list --state dead",
            "polaris-pipeline tasks show 4711 --realm POLARIS",
            "polaris-pipeline tasks requeue 4711 --realm POLARIS",
        ),
    )
    tsub = tasks.add_subparsers(
        dest="tasks_command", required=True, metavar="ACTION", parser_class=_Parser
    )
    lst = tsub.add_parser(
        "list",
        help="list tasks with their state",
        description="List tasks: id, realm, type, name, state (pending, leased, orphaned, "
        "backing-off, dead), attempts, executor and last error.",
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
    lst.add_argument(
        "--json", action="store_true", help="print JSON (one array) instead of a table"
    )

    show = tsub.add_parser(
        "show",
        help="show one task in full",
        description="Show one task: every property, decoded payload summary and state.",
        epilog="Example: polaris-pipeline tasks show 4711 --realm POLARIS",
    )
    _add_task_ref(show)
    _add_metastore(show)
    _add_policy(show)

    requeue = tsub.add_parser(
        "requeue",
        help="give a dead or backing-off task a fresh set of attempts",
        description="Reset a task's attempt count and backoff so the sweeper runs it again. "
        "A task leased right now is refused.",
        epilog="Example: polaris-pipeline tasks requeue 4711 --realm POLARIS",
    )
    _add_task_ref(requeue)
    _add_metastore(requeue)
    _add_policy(requeue)

    sweep = sub.add_parser(
        "sweep",
        help="lease and run every available task",
        description="Lease every orphaned task and run it (and the children table cleanup "
        "creates) until none remains; print a summary. Exits 1 if any task failed.",
        epilog=_examples(
            "polaris-pipeline sweep --metastore sqlite:///polaris.db --once --dry-run",
            "polaris-pipeline sweep --metastore sqlite:///polaris.db "
            "--storage-config storage.yaml --once",
        ),
    )
    _add_metastore(sweep)
    _add_realms(sweep)
    _add_policy(sweep)
    sweep.add_argument(
        "--storage-config",
        metavar="FILE",
        help="YAML or JSON mapping location prefixes to fsspec options "
        "(default: $POLARIS_PIPELINE_STORAGE_CONFIG)",
    )
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
        "and what the path guard would refuse",
    )
    sweep.add_argument(
        "--batch-size",
        type=int,
        default=32,
        metavar="N",
        help="tasks leased per round trip (default 32)",
    )
    sweep.add_argument(
        "--json",
        action="store_true",
        help="print the summary (with --dry-run: the plan) as JSON instead of text",
    )
    return parser


def _policy(args: argparse.Namespace) -> LeasePolicy:
    return LeasePolicy(
        lease_timeout_ms=args.lease_timeout_ms,
        grace_ms=args.grace_ms,
        max_attempts=args.max_attempts,
    )


def _type_name(task: TaskRow) -> str:
    try:
        return task.task_type().name.lower()
    except PolarisPipelineError:
        return f"?{task.task_type_code or ''}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def _short(text: str | None, n: int) -> str:
    if not text:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _task_json(task: TaskRow, state: TaskState) -> dict[str, Any]:
    return {
        "id": task.id,
        "realm": task.realm_id,
        "type": _type_name(task),
        "name": task.name,
        "state": state.value,
        "attempts": task.attempt_count,
        "executor": task.executor_id,
        "last_error": task.last_error or task.properties_error,
        "last_run_id": task.properties.get("lastAttemptRunId"),
        "next_attempt_ms": task.next_attempt_ms,
        "created_ms": task.create_timestamp,
    }


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    store = Metastore(args.metastore)
    created = store.init_schema(args.schema_version)
    found = store.check_schema()
    version = "no version row" if found is None else f"schema version {found}"
    print(
        f"{'created' if created else 'found existing'} Polaris entities table "
        f"in {store.display_url} ({version})",
        file=out,
    )
    return EXIT_OK


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    store = Metastore(args.metastore, policy=_policy(args))
    store.check_schema()
    _, rows = store.tasks_with_state(args.realms)
    if args.state:
        rows = [(t, s) for t, s in rows if s.value in args.state]
    if args.json:
        json.dump([_task_json(t, s) for t, s in rows], out, indent=2)
        out.write("\n")
        return EXIT_OK
    table = [
        [
            str(t.id),
            t.realm_id,
            _type_name(t),
            _short(t.name, 40),
            s.value,
            str(t.attempt_count),
            _short(t.executor_id, 30),
            _short(t.last_error or t.properties_error, 60),
        ]
        for t, s in rows
    ]
    print(
        format_table(
            ["ID", "REALM", "TYPE", "NAME", "STATE", "ATTEMPTS", "EXECUTOR", "LAST ERROR"], table
        ),
        file=out,
    )
    counts = Counter(s.value for _, s in rows)
    print(
        f"\n{len(rows)} task(s)" + "".join(f", {n} {k}" for k, n in sorted(counts.items())),
        file=out,
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    store = Metastore(args.metastore, policy=_policy(args))
    store.check_schema()
    task = store.get_task(args.realm, args.task_id)
    if task is None:
        raise PolarisPipelineError(f"no task {args.task_id} in realm {args.realm!r}")
    doc = _task_json(task, task.state(store.now_ms(), store.policy))
    doc["properties"] = {k: v for k, v in task.properties.items() if k != "data"}
    doc["data"] = task.properties.get("data")
    doc["internal_properties"] = task.internal_properties
    doc["entity_version"] = task.entity_version
    json.dump(doc, out, indent=2)
    out.write("\n")
    return EXIT_OK


def cmd_requeue(args: argparse.Namespace, out: TextIO) -> int:
    store = Metastore(args.metastore, policy=_policy(args))
    store.check_schema()
    state = store.requeue(args.realm, args.task_id)
    print(f"requeued task {args.task_id} in realm {args.realm!r}: now {state.value}", file=out)
    return EXIT_OK


class _Progress:
    """Progress of long deletes on a terminal; silent when stderr is not one."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()

    def __call__(self, lease: Lease, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        of = f"/{total} ({100 * done // total}%)" if total else ""
        self.stream.write(f"\r  {lease.realm_id}/{lease.task_id}: {what} {done}{of}\033[K")
        self.stream.flush()

    def status(self, text: str) -> None:
        """A transient line (overwritten by the next progress or report)."""
        if self.enabled:
            self.stream.write(f"\r  {text}\033[K")
            self.stream.flush()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def cmd_sweep(args: argparse.Namespace, out: TextIO) -> int:
    from polaris_pipeline.runner import Runner, Status
    from polaris_pipeline.storage.config import StorageConfig

    config = StorageConfig.load(args.storage_config)
    store = Metastore(args.metastore, policy=_policy(args))
    store.check_schema()
    progress = _Progress(sys.stderr)
    with Runner(store, config, progress=progress) as runner:
        if args.dry_run:
            return _print_dry_run(runner.dry_run(args.realms), out, as_json=args.json)
        progress.status(f"sweeping {store.display_url} …")

        def report(outcome: Any) -> None:
            progress.clear()
            line = f"{outcome.status.value:<10} {outcome.lease.label}"
            if outcome.result is not None:
                line += f"  deleted {outcome.result.deleted}"
                if outcome.children:
                    line += f", {len(outcome.children)} child task(s)"
            if outcome.error:
                line += f"  {outcome.error}"
            if not args.json:
                print(line, file=out, flush=True)

        outcomes = runner.sweep(args.realms, batch_size=args.batch_size, on_outcome=report)
        progress.clear()
    counts = Counter(o.status.value for o in outcomes)
    deleted = sum(o.result.deleted for o in outcomes if o.result)
    freed_known = all(o.result.bytes_freed is not None for o in outcomes if o.result)
    freed = sum(o.result.bytes_freed or 0 for o in outcomes if o.result)
    refused = sum(len(o.result.refused) for o in outcomes if o.result)
    summary = {
        "tasks": len(outcomes),
        "done": counts.get(Status.DONE.value, 0),
        "failed": counts.get(Status.FAILED.value, 0),
        "dead": counts.get(Status.DEAD.value, 0),
        "lease_lost": counts.get(Status.LEASE_LOST.value, 0),
        "files_deleted": deleted,
        "bytes_freed": freed if freed_known else None,
        "paths_refused": refused,
    }
    if args.json:
        json.dump(summary, out, indent=2)
        out.write("\n")
    else:
        freed_text = _human_bytes(freed) if freed_known else "unknown"
        print(
            f"\nswept {summary['tasks']} task(s): {summary['done']} done, "
            f"{summary['failed']} failed, "
            f"{summary['dead']} dead, {summary['lease_lost']} lease lost; "
            f"{deleted} file(s) deleted, {freed_text} freed, {refused} path(s) refused",
            file=out,
        )
    return EXIT_TASK_FAILED if summary["failed"] or summary["dead"] else EXIT_OK


def _print_dry_run(plans: list[tuple[TaskRow, Any]], out: TextIO, *, as_json: bool) -> int:
    docs: list[dict[str, Any]] = []
    for task, plan in plans:
        if isinstance(plan, str):
            docs.append({"task": task.label, "error": plan})
        else:
            docs.append(
                {
                    "task": task.label,
                    "would_delete": plan.would_delete,
                    "refused": [{"path": r.path, "reason": r.reason} for r in plan.refused],
                    "notes": plan.notes,
                }
            )
    if as_json:
        json.dump(docs, out, indent=2)
        out.write("\n")
        return EXIT_OK
    for doc in docs:
        print(doc["task"], file=out)
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
    return EXIT_OK


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


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
