"""What the commands print: tables and lines that fit the terminal, and their JSON.

An outcome's line and record are the report's renderers (``report.outcome_line``,
``report.outcome_json``), as everywhere; ids and times in JSON are ``tasks.formatting``'s.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from polaris_pipeline.cli.table import Column, output_width, render, wrapped
from polaris_pipeline.execution.outcome import TaskOutcome
from polaris_pipeline.metastore.transitions import DiscardOutcome, DiscardResult
from polaris_pipeline.report.outcome_json import outcome_json, totals_json, unreferenced_json
from polaris_pipeline.report.outcome_line import cli_line
from polaris_pipeline.report.progress import ProgressSink
from polaris_pipeline.report.totals import OutcomeTotals, RunningTotals
from polaris_pipeline.settings import PipelineSettings
from polaris_pipeline.storage.redact import mask_value
from polaris_pipeline.tasks.decoded import DecodedTask
from polaris_pipeline.tasks.formatting import (
    add_json_times,
    error_cause,
    iso_utc,
    json_id,
    purges_after,
    relative_time,
    short_task_name,
    task_label,
    truncate,
)
from polaris_pipeline.tasks.model import TaskPolicy, TaskRow, TaskState
from polaris_pipeline.tasks.release import ResolvedRelease
from polaris_pipeline.tasks.summary import available_at_ms, summarize

if TYPE_CHECKING:
    from polaris_pipeline.cleanup.context import CleanupResult


def dump_json(doc: Any, out: TextIO) -> None:
    # Every JSON the CLI prints, masked: a task's internal properties hold its catalog's
    # storage configuration (an AWS externalId), an error may quote a URL.
    json.dump(mask_value(doc), out, indent=2)
    out.write("\n")


# -- tasks: list and show ----------------------------------------------------------------


def _last_error(task: TaskRow) -> str | None:
    return task.last_error or task.properties_error


def _last_error_cause(task: TaskRow) -> str:
    return error_cause(_last_error(task), task.realm_id, task.id, task.name)


def hold_json(task: TaskRow) -> dict[str, Any]:
    """A held task's hold: when it purges, its drop time and where that comes from."""
    doc: dict[str, Any] = {"text": purges_after(task.held_until_ms)}
    add_json_times(doc, purges_after=task.held_until_ms, dropped=task.dropped_at_ms)
    doc["drop_time_source"] = _source(task)
    return doc


def _source(task: TaskRow) -> str | None:
    return None if task.drop_time_source is None else task.drop_time_source.value


def task_json(
    task: TaskRow,
    state: TaskState,
    now_ms: int,
    settings: PipelineSettings,
    release: ResolvedRelease | None = None,
) -> dict[str, Any]:
    """One task of ``tasks list --json``; ``release``: its realm's Polaris release and why."""
    summary = summarize(task)
    doc: dict[str, Any] = {
        "id": json_id(task.id),
        "realm": task.realm_id,
        "type": summary.type,
        "table": summary.table,
        "name": task.name,
        "label": short_task_name(task.name),
        "state": state.value,
        "attempts": task.attempt_count,
        "max_attempts": settings.metastore.max_attempts,
        "executor": task.executor_id,
        "last_error": _last_error(task),
        "last_error_cause": _last_error_cause(task) or None,
        "last_run_id": task.properties.get("lastAttemptRunId"),
        # The last failure cannot heal by retrying: dead-lettered at once.
        "permanent": task.failure_permanent,
        # An operator let its purge go past a live table sharing its location.
        "shared_location_allowed": task.shared_location_allowed,
    }
    if release is not None:
        doc["polaris_release"] = release.to_json()
    if state is TaskState.HELD:
        doc["hold"] = hold_json(task)
    add_json_times(
        doc,
        available_at=available_at_ms(task, state, now_ms, _policy(settings)),
        next_attempt=task.next_attempt_ms,
        last_attempt_start=task.start_time_ms,
        last_attempt_end=task.end_time_ms,
        created=task.create_timestamp,
    )
    return doc


def task_detail_json(
    task: TaskRow, state: TaskState, now_ms: int, settings: PipelineSettings
) -> dict[str, Any]:
    """``tasks show --json``: the listing's record with the payload and every property."""
    doc = task_json(task, state, now_ms, settings)
    summary = summarize(task)
    doc["payload"] = {**dataclasses.asdict(summary), "entity_id": json_id(summary.entity_id)}
    doc["properties"] = {k: v for k, v in task.properties.items() if k != "data"}
    doc["data"] = task.properties.get("data")
    doc["internal_properties"] = task.internal_properties
    doc["entity_version"] = task.entity_version
    return doc


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
    if state is TaskState.HELD:
        return f"{purges_after(task.held_until_ms)} ({_source(task)})"
    return relative_time(available_at_ms(task, state, now, _policy(settings)), now)


def print_task_list(
    rows: Sequence[tuple[TaskRow, TaskState]], now: int, settings: PipelineSettings, out: TextIO
) -> None:
    """The table of ``tasks list``, its footer of counts, and the columns it left out."""
    table = []
    for t, s in rows:
        summary = summarize(t)
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
                _last_error_cause(t),
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
        note = f"not shown at {width} columns: {', '.join(hidden)} (--json has all)"
        print(wrapped(note, width), file=out)


# Polaris's PolarisEntityType codes (the task model page, section 3).
ENTITY_TYPES = {
    0: "NULL_TYPE",
    1: "ROOT",
    2: "PRINCIPAL",
    3: "PRINCIPAL_ROLE",
    4: "CATALOG",
    5: "CATALOG_ROLE",
    6: "NAMESPACE",
    7: "TABLE_LIKE",
    8: "TASK",
    9: "FILE",
    10: "POLICY",
}


def unhandled_text(task: TaskRow) -> str:
    """What an unhandled task is: the dropped entity's type and name, and that nothing
    runs it (not an undecodable payload: Polaris wrote it as it meant to)."""
    try:
        entity = json.loads(task.data())
    except ValueError:
        entity = {}
    code = entity.get("typeCode") if isinstance(entity, dict) else None
    name = entity.get("name") if isinstance(entity, dict) else None
    kind = ENTITY_TYPES.get(code, f"typeCode {code}") if isinstance(code, int) else "entity"
    what = f"{kind} {name!r}" if name else kind
    return (
        f"not handled: the cleanup of a dropped {what}, which Polaris writes and never runs "
        "(no files); `tasks discard` deletes it"
    )


def _show_pairs(
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
    if task.unhandled:
        lines.append(("payload", unhandled_text(task)))
    elif summary.problem:
        lines.append(("payload", f"cannot be decoded: {summary.problem}"))
    lines.append(
        (
            "state",
            f"{state.value}, {task.attempt_count} of {settings.metastore.max_attempts} attempts",
        )
    )

    def when(ms: int | None) -> str:
        return f"{iso_utc(ms)} ({relative_time(ms, now)})"

    if state is TaskState.HELD:
        dropped = f"{iso_utc(task.dropped_at_ms)}, from the {_source(task)}"
        lines.append(("hold", f"{purges_after(task.held_until_ms)} (dropped {dropped})"))
    available = available_at_ms(task, state, now, _policy(settings))
    if state is not TaskState.ORPHANED and available is not None:
        lines.append(("available", when(available)))
    lines.append(("created", when(task.create_timestamp)))
    if task.executor_id:
        lines.append(("executor", task.executor_id))
    for key, ms in (("last start", task.start_time_ms), ("last end", task.end_time_ms)):
        if ms is not None:
            lines.append((key, when(ms)))
    run_id = task.properties.get("lastAttemptRunId")
    if run_id:
        lines.append(("last run", run_id))
    error = _last_error_cause(task)
    if error:
        lines.append(("last error", error))
    if task.failure_permanent:
        lines.append(("failure", "permanent: retrying cannot heal it, dead-lettered at once"))
    if task.shared_location_allowed:
        lines.append(
            ("override", "shared-location guard overridden by an operator (allowSharedLocation)")
        )
    return lines


def print_task(
    task: TaskRow, state: TaskState, now: int, settings: PipelineSettings, out: TextIO
) -> None:
    """``tasks show``: one aligned ``key  value`` line per property, wrapped to the width
    between words: an id, a location or a path is never cut."""
    width = output_width(out)
    pairs = _show_pairs(task, state, now, settings)
    key_width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        print(wrapped(value, width, key.ljust(key_width) + "  "), file=out)


_DISCARD_VERBS = {
    DiscardOutcome.DISCARDED: "discarded",
    DiscardOutcome.WOULD_DISCARD: "would discard",
    DiscardOutcome.REFUSED: "refused",
}


def print_discards(results: Sequence[DiscardResult], out: TextIO, *, dry_run: bool) -> int:
    """One line per task named, then the total; returns how many were refused."""
    for r in results:
        where = f"{r.realm_id}/{r.task_id}" if r.realm_id else str(r.task_id)
        name = f" {r.name!r}" if r.name else ""
        detail = f": {r.detail}" if r.detail else ""
        print(f"{_DISCARD_VERBS[r.outcome]:<14} {where}{name}{detail}", file=out)
    done = sum(r.outcome is not DiscardOutcome.REFUSED for r in results)
    refused = len(results) - done
    if dry_run:
        tail = f"dry run: {done} unhandled task(s) would be discarded; nothing was changed"
    else:
        tail = f"{done} unhandled task(s) discarded"
    print(f"\n{tail}" + (f"; {refused} refused" if refused else ""), file=out)
    return refused


# -- run and sweep -----------------------------------------------------------------------


class TerminalProgress(ProgressSink):
    """Progress of long deletes on a terminal, on one line; silent when the stream is not one.

    Every update is shown (rewriting one line costs nothing); ``status`` shows a
    transient line, ``clear`` erases it before a task's line is printed.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        # The two-space indent plus the text stays one character short of the width:
        # a line that fills the terminal wraps, and \r can then no longer take it back.
        width = output_width(stream) if self.enabled else None
        self.width = max(20, width - 3) if width else None
        super().__init__(self.status, interval_s=0)

    def status(self, text: str) -> None:
        """A transient line (overwritten by the next progress or report)."""
        if not self.enabled:
            return
        line = truncate(text, self.width) if self.width else text
        self.stream.write(f"\r  {line}\033[K")
        self.stream.flush()

    def clear(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


class OutcomeReport:
    """The per-task lines (or JSON records) and the totals of the tasks a command ran.

    Callable as the Runner's ``on_outcome``.
    """

    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self.running = RunningTotals()  # also knows each child's parent
        self.records: list[dict[str, Any]] = []
        self.progress = TerminalProgress(sys.stderr)
        self._out = out
        self._as_json = as_json
        self._width = output_width(out)

    def __call__(self, outcome: TaskOutcome) -> None:
        self.records.append(outcome_json(outcome, self.running.add(outcome)))
        if not self._as_json:
            self.progress.clear()
            print(cli_line(outcome, self._width), file=self._out, flush=True)

    @property
    def totals(self) -> OutcomeTotals:
        return self.running.totals

    def finish(self, verb: str, head: dict[str, Any] | None = None) -> None:
        """The total: ``verb`` and two lines, or the JSON document (``head`` first)."""
        if self._as_json:
            doc = {**(head or {}), **totals_json(self.totals), "outcomes": self.records}
            dump_json(doc, self._out)
        else:
            print(f"\n{verb} {self.totals.tasks_text()}", file=self._out)
            print(f"  {self.totals.line()}", file=self._out)


def plan_json(decoded: DecodedTask, plan: CleanupResult | str) -> dict[str, Any]:
    """A dry run's record of one task (as the dry run decoded it): what would be
    deleted and refused, or its error."""
    task, summary = decoded.row, summarize(decoded)
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
        # Listed apart: files the table's metadata no longer names (its prefix, last).
        doc["unreferenced"] = unreferenced_json(plan.unreferenced)
    return doc


def _print_unreferenced(doc: dict[str, Any] | None, out: TextIO) -> None:
    """A table's unreferenced files in a dry run: apart from the referenced ones."""
    if doc is None:
        return
    print(f"  {doc['summary']}", file=out)
    for path in doc["paths"]:
        print(f"  unreferenced  {path}", file=out)
    if doc["more_paths"]:
        print(f"  unreferenced  ... and {doc['more_paths']} more", file=out)
    for kept in doc["kept"]:
        print(f"  keep    {kept}", file=out)


def would_fail(docs: Sequence[dict[str, Any]]) -> int:
    """How many of a dry run's tasks would fail: an error, or a path the guard refuses
    (a refusal fails its task, as the run would)."""
    return sum(1 for d in docs if "error" in d or d.get("refused"))


def print_plans(docs: Sequence[dict[str, Any]], reason: str | None, out: TextIO) -> None:
    """A dry run in text: per task what would be deleted, refused and noted; the total."""
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
        _print_unreferenced(doc.get("unreferenced"), out)
    total = sum(len(d.get("would_delete", [])) for d in docs)
    failing = would_fail(docs)
    fail = f", {failing} task(s) would fail (an error or a refused path)" if failing else ""
    print(
        f"\ndry run: {len(docs)} task(s), {total} file(s) would be deleted{fail}; "
        "nothing was changed",
        file=out,
    )
    if reason:
        print(reason, file=out)


def _policy(settings: PipelineSettings) -> TaskPolicy:
    return TaskPolicy.from_section(settings.metastore)
