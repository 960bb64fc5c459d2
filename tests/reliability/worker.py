"""One sweeper process of a reliability scenario: ``python -m tests.reliability.worker CFG.json``.

What runs is the engine itself: ``polaris_pipeline.execution.runner.Runner`` with its
handlers, heartbeat and fencing (mode ``runner``: ``sweep_tasks`` in a loop),
or the operator CLI's ``main`` (mode ``cli``: ``polaris-pipeline sweep``
and friends), or a model of Polaris's own executor (mode ``polaris``: list-then-CAS
leasing from ``builders/polaris_leaser.py``, then a BATCH row run as Polaris 1.4.1's
handler and executor run it, checked against them: ``tests/reliability/polaris_executor.py``;
without any fencing).

Three things are added around the engine, none of which changes what it decides:

- a journal (``tests/reliability/journal.py``): the engine's per-path delete
  functions are wrapped so that a ``begin`` line naming the lease (task, attempt,
  executor) is on disk before each delete and an ``end`` line with its result
  after; ``Runner`` is subclassed only to remember which lease is executing;
- optionally, slow deletes (a sleep between ``begin`` and the delete) so a test
  can kill or pause the process mid-manifest;
- optionally, a wall clock moved by ``clock_skew_s`` (when libfaketime is not used)
  and a :class:`~tests.reliability.faults.FaultyResolver` for storage faults.

The configuration is a JSON object; see ``WorkerConfig`` in ``harness.py``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from tests.reliability.journal import Journal

CURRENT: contextvars.ContextVar[Any] = contextvars.ContextVar("current_lease", default=None)
NO_LEASE = {"realm": "?", "task": -1, "attempt": -1, "executor": "?"}


def _lease_fields(lease: Any) -> dict[str, Any]:
    """How a journal line names a lease: the holder's fencing token and its task."""
    return {
        "realm": lease.realm_id,
        "task": lease.task_id,
        "attempt": lease.attempt,
        "executor": lease.executor_id,
    }


def _who() -> dict[str, Any]:
    lease = CURRENT.get()
    if lease is None:
        return dict(NO_LEASE)
    return _lease_fields(lease)


def _skew_clock(seconds: float) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    offset_ns = int(seconds * 1e9)
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + offset_ns


def install_journal(journal: Journal, delay: dict[str, Any] | None) -> None:
    """Wrap the engine's per-path delete functions with journal lines (and optional delay)."""
    import polaris_pipeline.storage.delete as delete_mod

    match = (delay or {}).get("match")
    seconds = float((delay or {}).get("seconds", 0))

    def slow(uris: Iterable[str]) -> None:
        if seconds and any(match is None or match in u for u in uris):
            time.sleep(seconds)

    def result_of(report: Any, uri: str, n_deleted: int, n_missing: int) -> str:
        if uri in report.failed:
            return "failed"
        if uri in report.deleted[n_deleted:]:
            return "deleted"
        if uri in report.missing[n_missing:]:
            return "missing"
        return "unknown"

    def journaled(uris: list[str], report: Any, delete: Callable[[], None]) -> None:
        # "begin" lines are on disk before the delete starts, "end" lines after it,
        # whether it returned or raised.
        who = _who()
        for uri in uris:
            journal.write("begin", uri=uri, **who)
        slow(uris)
        n_deleted, n_missing = len(report.deleted), len(report.missing)
        try:
            delete()
        finally:
            for uri in uris:
                journal.write(
                    "end", uri=uri, res=result_of(report, uri, n_deleted, n_missing), **who
                )

    def per_path(original: Any) -> Any:
        def wrapped(resolver: Any, *args: Any) -> None:
            uri, report = args[-3], args[-1]
            journaled([uri], report, lambda: original(resolver, *args))

        return wrapped

    original_s3 = delete_mod._delete_s3_chunk

    def s3_chunk(resolver: Any, fs: Any, bucket: str, chunk: list[Any], report: Any) -> None:
        journaled(
            [uri for uri, _ in chunk],
            report,
            lambda: original_s3(resolver, fs, bucket, chunk, report),
        )

    # (resolver, roots, sidecar_check, uri, path, report): the sidecar goes inside it
    delete_mod._delete_local = per_path(delete_mod._delete_local)
    delete_mod._delete_other = per_path(delete_mod._delete_other)  # (resolver, fs, uri, path, rep)
    delete_mod._delete_s3_chunk = s3_chunk


def journal_runner_class(journal: Journal) -> type:
    from polaris_pipeline.execution.runner import Runner

    class JournalRunner(Runner):
        """The engine's Runner; it only remembers which lease it is executing."""

        def lease(self, limit: int, realms: Iterable[str] | None = None) -> Any:
            leases = super().lease(limit, realms)
            for lease in leases:
                journal.write("lease", **_lease_fields(lease), start_ms=lease.start_time_ms)
            return leases

        def execute(self, lease: Any, **kwargs: Any) -> Any:
            token = CURRENT.set(lease)
            journal.write("exec", **_lease_fields(lease), start_ms=lease.start_time_ms)
            try:
                outcome = super().execute(lease, **kwargs)
            finally:
                CURRENT.reset(token)
            journal.write(
                "outcome",
                **_lease_fields(lease),
                status=outcome.status.value,
                error=outcome.error,
                next_ms=outcome.next_attempt_ms,
                children=len(outcome.children),
            )
            return outcome

    return JournalRunner


def _policy(cfg: dict[str, Any]) -> Any:
    from polaris_pipeline.tasks.model import TaskPolicy

    return TaskPolicy(**cfg.get("policy", {}))


def _storage(cfg: dict[str, Any]) -> Any:
    from polaris_pipeline.storage.config import StorageConfig

    if cfg.get("storage") is None:
        return StorageConfig()
    return StorageConfig.from_mapping(cfg["storage"], source="worker storage config")


def _stopped(cfg: dict[str, Any]) -> bool:
    stop = cfg.get("stop_file")
    return os.path.exists(stop) if stop else False


def run_runner(cfg: dict[str, Any], journal: Journal) -> int:
    """``sweep_tasks`` in a loop until the realms are empty (or once)."""
    from polaris_pipeline.errors import MetastoreError
    from polaris_pipeline.execution.holder import make_executor_id
    from polaris_pipeline.execution.sweep import sweep_tasks
    from polaris_pipeline.metastore import Metastore

    runner_cls = journal_runner_class(journal)
    store = Metastore(cfg["url"], policy=_policy(cfg))
    config = _storage(cfg)
    realms = cfg.get("realms")
    deadline = time.monotonic() + float(cfg.get("deadline_s", 300))

    def new_runner() -> Any:
        resolver = None
        if cfg.get("fault_plan"):
            from tests.reliability.faults import FaultyResolver

            resolver = FaultyResolver(config, cfg["fault_plan"])
        return runner_cls(
            store,
            config,
            executor_id=make_executor_id(cfg.get("name", "sweep")),
            resolver=resolver,
            heartbeat_interval_s=cfg.get("heartbeat_interval_s"),
        )

    runner = new_runner()
    code = 0
    try:
        while True:
            try:
                sweep_tasks(runner, realms, batch_size=int(cfg.get("batch_size", 32)))
                if cfg.get("until", "empty") == "once":
                    break
                if store.count_tasks(realms) == 0:
                    break
            except MetastoreError as exc:
                # What a re-run does: a new process, a new executor id; the old
                # one's leases lapse after the lease timeout.
                journal.write("error", msg=str(exc))
                print(f"worker: metastore error: {exc}", file=sys.stderr, flush=True)
                runner.close()
                runner = new_runner()
            if _stopped(cfg):
                break
            if time.monotonic() > deadline:
                code = 3
                break
            time.sleep(float(cfg.get("idle_s", 0.05)))
    finally:
        runner.close()
        store.dispose()
    return code


def run_cli(cfg: dict[str, Any], journal: Journal) -> int:
    """The operator CLI's ``main`` (the ``polaris-pipeline`` entry point), journaled."""
    import polaris_pipeline.execution.runner as runner_mod
    from polaris_pipeline import cli

    runner_mod.Runner = journal_runner_class(journal)  # type: ignore[assignment,misc]
    return cli.main(list(cfg["argv"]))


def run_polaris(cfg: dict[str, Any], journal: Journal) -> int:
    """Polaris's executor: list-then-CAS lease, then BATCH rows as Polaris 1.4.1 runs them
    (tests/reliability/polaris_executor.py): existence check, 3 tries per delete, the row
    dropped when every delete succeeded and left otherwise. ``refuse_deletes``: storage
    that refuses every delete (the oracle's ``refuse-deletes``)."""
    from sqlalchemy import delete

    from builders.polaris_leaser import polaris_load_tasks
    from polaris_pipeline.metastore import Metastore
    from polaris_pipeline.metastore.schema import entities
    from tests.reliability.polaris_executor import Verdict, batch_files, row_properties, run_batch

    store = Metastore(cfg["url"], policy=_policy(cfg))
    engine = store.engine
    timeout_ms = int(cfg.get("policy", {}).get("lease_timeout_ms", 300_000))
    executor = cfg.get("name", "polaris")
    deadline = time.monotonic() + float(cfg.get("deadline_s", 300))
    realms = list(cfg["realms"])
    refuse = bool(cfg.get("refuse_deletes", False))
    idle = 0

    def local(uri: str) -> str:
        return uri.removeprefix("file://")

    while idle < int(cfg.get("idle_rounds", 40)) and time.monotonic() < deadline:
        leased_any = False
        for realm in realms:
            for task_id, attempt in polaris_load_tasks(
                engine, realm, executor, int(cfg.get("batch_size", 20)), timeout_ms
            ):
                leased_any = True
                who = {"realm": realm, "task": task_id, "attempt": attempt, "executor": executor}
                journal.write("lease", **who)

                def delete_file(uri: str, who: dict[str, Any] = who) -> None:
                    journal.write("begin", uri=uri, **who)
                    try:
                        if refuse:
                            raise PermissionError(f"delete refused by the test's storage: {uri}")
                        os.unlink(local(uri))
                        res = "deleted"
                    except FileNotFoundError:
                        res = "missing"  # gone since the check: Hadoop's delete says false
                    except OSError:
                        journal.write("end", uri=uri, res="error", **who)
                        raise
                    journal.write("end", uri=uri, res=res, **who)

                files = batch_files(row_properties(engine, realm, task_id))
                verdict = (
                    files
                    if isinstance(files, Verdict)
                    else run_batch(
                        files, exists=lambda u: os.path.exists(local(u)), delete=delete_file
                    )
                )
                if verdict is Verdict.DONE:
                    with engine.begin() as conn:
                        conn.execute(
                            delete(entities).where(
                                entities.c.realm_id == realm, entities.c.id == task_id
                            )
                        )
                journal.write("outcome", status=verdict.value, **who)
        idle = 0 if leased_any else idle + 1
        if store.count_tasks(realms) == 0 or _stopped(cfg):
            break
        time.sleep(float(cfg.get("idle_s", 0.05)))
    store.dispose()
    return 0


def run_dagster(cfg: dict[str, Any], journal: Journal) -> int:
    """The deployed code location (``definitions.defs``): sensor ticks, then each requested
    run of ``polaris_task_job`` executed in this process, until the realms are empty."""
    from dagster import DagsterInstance, SensorResult, build_sensor_context

    import definitions
    import polaris_pipeline.dagster.task_job as task_job
    import polaris_pipeline.dagster.task_step as task_step
    from polaris_pipeline.dagster.contract import JOB_NAME
    from polaris_pipeline.dagster.sweeper import SENSOR_NAME
    from polaris_pipeline.metastore import Metastore

    # The task job's steps make their Runner in task_step.
    task_step.Runner = journal_runner_class(journal)  # type: ignore[assignment,misc]
    defs = definitions.defs
    resources = dict(defs.resources or {})
    job = defs.get_job_def(JOB_NAME)
    # The sweeper as the code location deploys it (storage and backlog resources included).
    sweeper = defs.resolve_sensor_def(SENSOR_NAME)
    run_resources: dict[str, Any] | None = None
    if cfg.get("fast_retries"):
        from dagster import RetryPolicy

        job = task_job.build_polaris_task_job(retry_policy=RetryPolicy(max_retries=1, delay=0.05))
        run_resources = {k: v for k, v in resources.items() if k in ("metastore", "storage")}
    store = Metastore(os.environ["POLARIS_METASTORE_URL"])
    deadline = time.monotonic() + float(cfg.get("deadline_s", 300))
    code = 0
    with DagsterInstance.local_temp(cfg["dagster_home"], overrides=NO_TELEMETRY) as instance:
        while True:
            with build_sensor_context(instance=instance, resources=resources) as context:
                tick = sweeper(context)
            requests = list(tick.run_requests or []) if isinstance(tick, SensorResult) else []
            for request in requests:
                journal.write("dagster_request", tags=dict(request.tags))
                result = job.execute_in_process(
                    run_config=request.run_config,
                    tags=request.tags,
                    instance=instance,
                    resources=run_resources,
                    raise_on_error=False,
                )
                journal.write("dagster_run", run_id=result.run_id, success=result.success)
            until = cfg.get("until", "empty")
            if until == "once" or (until == "idle" and not requests) or store.count_tasks() == 0:
                break
            if time.monotonic() > deadline:
                code = 3
                break
            time.sleep(float(cfg.get("idle_s", 0.1)))
        if cfg.get("snapshot_out"):
            # What the UI shows of the code location: resources with their configured
            # values, jobs, sensors.
            from dagster._core.remote_representation.external_data import RepositorySnap
            from dagster._serdes import serialize_value

            snap = RepositorySnap.from_def(defs.get_repository_def())
            with open(cfg["snapshot_out"], "w", encoding="utf-8") as f:
                f.write(serialize_value(snap))
    store.dispose()
    return code


def run_freeze(cfg: dict[str, Any], journal: Journal) -> int:
    """Lease every available task, then stop this process (SIGSTOP) in the middle of the
    heartbeat's own transaction: after its UPDATE, before its COMMIT, as a process frozen
    by a VM pause, a debugger or a network partition would be."""
    import signal
    from contextlib import contextmanager

    from polaris_pipeline.execution.holder import make_executor_id
    from polaris_pipeline.metastore import Metastore

    store = Metastore(cfg["url"], policy=_policy(cfg))
    executor = make_executor_id(cfg.get("name", "frozen"))
    leases = store.lease_available(executor, 100)
    for lease in leases:
        journal.write(
            "lease",
            realm=lease.realm_id,
            task=lease.task_id,
            attempt=lease.attempt,
            executor=executor,
            start_ms=lease.start_time_ms,
        )
    real_begin = store._begin

    @contextmanager
    def begin_then_freeze() -> Any:
        with real_begin() as conn:
            yield conn
            journal.write("frozen")
            os.kill(os.getpid(), signal.SIGSTOP)

    store._begin = begin_then_freeze  # type: ignore[method-assign]
    for realm in sorted({lease.realm_id for lease in leases}):
        store.renew_held_by(realm, executor)
    return 0


NO_TELEMETRY = {"telemetry": {"enabled": False}}
MODES = {
    "runner": run_runner,
    "cli": run_cli,
    "polaris": run_polaris,
    "dagster": run_dagster,
    "freeze": run_freeze,
}


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as f:
        cfg = json.load(f)
    if cfg.get("clock_skew_s"):
        _skew_clock(float(cfg["clock_skew_s"]))
    if cfg["mode"] != "cli":  # the CLI configures logging itself (-v)
        logging.basicConfig(
            level=logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
    journal = Journal(cfg["journal"])
    if cfg.get("journal_deletes", True):
        install_journal(journal, cfg.get("delay"))
    journal.write("start", name=cfg.get("name"), mode=cfg["mode"], wall=time.time())
    start_file = cfg.get("start_file")
    if start_file:
        # All workers of a race begin together, once every one of them is up.
        ready_deadline = time.monotonic() + 120
        while not os.path.exists(start_file) and time.monotonic() < ready_deadline:
            time.sleep(0.01)
        journal.write("go")
    code = 1
    try:
        code = MODES[cfg["mode"]](cfg, journal)
    finally:
        rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        journal.write("exit", code=code, maxrss_kb=rss_kb)
        journal.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
