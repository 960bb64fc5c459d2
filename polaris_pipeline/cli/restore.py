"""``tasks restore``: bring a dropped table back from its last metadata (``restore/``)."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from polaris_pipeline.cli.argtypes import text
from polaris_pipeline.cli.context import (
    EXIT_OK,
    checked_metastore,
    find_task,
    settings_for,
    storage_config,
)
from polaris_pipeline.cli.setting_flags import add_setting
from polaris_pipeline.restore.register import RestTarget
from polaris_pipeline.restore.restore import restore
from polaris_pipeline.settings import env_variable
from polaris_pipeline.storage.resolve import StorageResolver


def add_restore_parser(
    tasks: argparse._SubParsersAction[Any],
) -> argparse.ArgumentParser:
    """The ``tasks restore`` subcommand's own flags (the task, metastore and storage flags
    are the parser's shared ones)."""
    p = tasks.add_parser(
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
        # Laid out as the parser's other examples (cli/parser.py _examples).
        epilog="Example: polaris-pipeline tasks restore 4711\n"
        "         polaris-pipeline tasks restore 4711 --as ns.orders_restored "
        "--rest-uri https://polaris.example/api/catalog --catalog prod",
    )
    p.add_argument(
        "--as",
        dest="new_name",
        metavar="NAMESPACE.NAME",
        type=text("a namespace and a name"),
        help="register under this name (default: its own)",
    )
    add_setting(p, "restore", "rest_uri", metavar="URI")
    add_setting(p, "restore", "catalog", metavar="NAME")
    return p


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=False)
    task = find_task(store, args.task_id, args.realm, settings.metastore.realm_list())
    target = RestTarget.from_section(settings.restore)
    resolver = StorageResolver(storage_config(settings))
    result = restore(store, resolver, target, task, args.new_name, settings.storage.deletion_record)
    for line in result.lines:
        print(line, file=out)
    return EXIT_OK
