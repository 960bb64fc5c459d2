"""The commands that read and manage task rows: ``init-metastore``, ``grant-role`` (the SQL
that limits the pipeline's role to them) and ``tasks`` list, show, requeue and discard
(``tasks run`` is in ``run.py``, with the sweep).

``list`` and ``show`` open the metastore read-only: they never create or change anything.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from polaris_pipeline.cli.context import (
    EXIT_ERROR,
    EXIT_OK,
    checked_metastore,
    find_task,
    open_metastore,
    settings_for,
)
from polaris_pipeline.cli.output import (
    dump_json,
    print_discards,
    print_task,
    print_task_list,
    task_detail_json,
    task_json,
)
from polaris_pipeline.metastore.privileges import role_script
from polaris_pipeline.metastore.release_probe import ReleaseProbe


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


def cmd_grant_role(args: argparse.Namespace, out: TextIO) -> int:
    out.write(role_script(args.role))
    return EXIT_OK


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=True)
    now, rows = store.tasks_with_state(settings.metastore.realm_list())
    if args.state:
        rows = [(t, s) for t, s in rows if s.value in args.state]
    if args.json:
        # Each realm's release is read once (one bounded query), and only for --json.
        releases = ReleaseProbe(store)
        dump_json(
            [task_json(t, s, now, settings, releases.resolve(t.realm_id)) for t, s in rows], out
        )
    else:
        print_task_list(rows, now, settings, out)
    return EXIT_OK


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=True)
    task = find_task(store, args.task_id, args.realm, settings.metastore.realm_list())
    now, task, state = store.task_state(task)
    if args.json:
        dump_json(task_detail_json(task, state, now, settings), out)
    else:
        print_task(task, state, now, settings, out)
    return EXIT_OK


def cmd_requeue(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=False)
    task = find_task(store, args.task_id, args.realm, settings.metastore.realm_list())
    allow = bool(args.allow_shared_location)
    state = store.requeue(
        task.realm_id, task.id, allow_shared_location=allow, force=bool(args.force)
    )
    override = "; the shared-location guard is overridden for it" if allow else ""
    print(
        f"requeued task {task.id} in realm {task.realm_id!r}: now {state.value}{override}",
        file=out,
    )
    return EXIT_OK


def cmd_discard(args: argparse.Namespace, out: TextIO) -> int:
    if bool(args.task_ids) == bool(args.all_unhandled):
        raise ValueError("name the tasks to discard by ID, or pass --all-unhandled (not both)")
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=args.dry_run)
    results = store.discard_unhandled(
        args.task_ids or None, settings.metastore.realm_list(), dry_run=args.dry_run
    )
    refused = print_discards(results, out, dry_run=args.dry_run)
    return EXIT_ERROR if refused else EXIT_OK
