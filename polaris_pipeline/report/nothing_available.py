"""Why a sweep found nothing to do: the one explanation, in one place.

Both say how many tasks wait in each state, in the same words (``STATE_WORDS``),
naming the realms the same way (``formatting.realms_text``):

- ``nothing_available_reason``: the CLI's, from the rows, with when each state's
  first task frees (``nothing is available in realms [A]: 1 leased (the first
  lease expires in 4m30s, at ...), 2 dead (only `tasks requeue` revives them)``);
- ``no_orphans_reason``: the sensor's skip reason, from one count per state,
  zeros included so that a tick's reasons line up (``no orphaned tasks in realms
  [A]; 2 pending within grace, 1 leased, 0 backing off, 0 dead; next sweep in 30 s``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from polaris_pipeline.tasks.formatting import iso_utc, realms_text, relative_time
from polaris_pipeline.tasks.hold import DROP_TIME_RULE
from polaris_pipeline.tasks.model import TaskPolicy, TaskRow, TaskState
from polaris_pipeline.tasks.summary import available_at_ms

# How a count of tasks in each state is written.
STATE_WORDS: Mapping[TaskState, str] = {
    TaskState.PENDING: "pending within grace",
    TaskState.LEASED: "leased",
    TaskState.BACKING_OFF: "backing off",
    TaskState.DEAD: "dead",
    TaskState.UNHANDLED: "unhandled",
    TaskState.ORPHANED: "orphaned",
    TaskState.HELD: "held",
}
# When the first task of a state frees (soonest kind first), and what only an operator can do.
_WHEN = {
    TaskState.LEASED: "the first lease expires",
    TaskState.BACKING_OFF: "the first retry is",
    TaskState.PENDING: "the first grace period ends",
    TaskState.HELD: "the first hold ends",
}
_OPERATOR = {
    TaskState.DEAD: "only `tasks requeue` revives them",
    TaskState.UNHANDLED: "never run; `tasks discard` removes them",
}
# The CLI's order: what frees by itself first, soonest kind first.
_CLI_ORDER = (*_WHEN, *_OPERATOR, TaskState.ORPHANED)
# The sensor's: every state a task can wait in, zeros included.
_SENSOR_ORDER = (TaskState.PENDING, TaskState.LEASED, TaskState.BACKING_OFF, TaskState.DEAD)


def _count(state: TaskState, n: int) -> str:
    return f"{n} {STATE_WORDS[state]}"


def nothing_available_reason(
    rows: list[tuple[TaskRow, TaskState]],
    now_ms: int,
    policy: TaskPolicy,
    realms: list[str] | None,
) -> str:
    """Why a sweep finds nothing: how many tasks are in each state, and when the first frees."""
    where = realms_text(realms)
    if not rows:
        return f"nothing is available: no tasks in {where}"

    def detail(state: TaskState) -> str:
        if state in _OPERATOR:
            return f" ({_OPERATOR[state]})"
        if state not in _WHEN:
            return ""
        times = [available_at_ms(t, s, now_ms, policy) for t, s in rows if s is state]
        known = [t for t in times if t is not None]
        if not known:
            return ""
        first = min(known)
        return f" ({_WHEN[state]} {relative_time(first, now_ms)}, at {iso_utc(first)})"

    counts = {state: sum(1 for _, s in rows if s is state) for state in TaskState}
    parts = [_count(state, counts[state]) + detail(state) for state in _CLI_ORDER if counts[state]]
    return f"nothing is available in {where}: " + ", ".join(parts)


def no_orphans_reason(
    counts: Mapping[TaskState, int],
    realms: Iterable[str] | None,
    *,
    wait_s: int,
    seen: Iterable[str] = (),
    limit_note: str = "",
) -> str:
    """The sensor's reason for leasing nothing, from one count per state.

    ``realms``: the realms swept (None: every realm, and then the realms ``seen`` with
    tasks are named, or ``any realm``); ``limit_note``: why fewer were selected than
    there are, if so.
    """
    named = list(realms) if realms is not None else (sorted(seen) or None)
    parts = [_count(state, counts.get(state, 0)) for state in _SENSOR_ORDER]
    held = counts.get(TaskState.HELD, 0)
    if held:  # only where a hold is set: most deployments hold nothing
        parts.append(
            f"{_count(TaskState.HELD, held)} (purges on hold; {DROP_TIME_RULE}; "
            "`tasks list` says until when and which)"
        )
    orphaned = counts.get(TaskState.ORPHANED, 0)
    if orphaned:
        parts.append(f"{_count(TaskState.ORPHANED, orphaned)} but taken by a concurrent sweeper")
    return (
        f"no orphaned tasks in {realms_text(named)}; {', '.join(parts)}{limit_note}; "
        f"next sweep in {wait_s} s"
    )
