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
from polaris_pipeline.restore.register import CATALOG_ENV, URI_ENV, RestTarget
from polaris_pipeline.restore.restore import restore
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
        "$POLARIS_PIPELINE_RESTORE_CLIENT_ID and $POLARIS_PIPELINE_RESTORE_CLIENT_SECRET.",
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
    p.add_argument(
        "--rest-uri",
        metavar="URI",
        type=text("the catalog's REST endpoint"),
        help="the catalog's Iceberg REST endpoint, e.g. https://polaris/api/catalog "
        f"(default: ${URI_ENV}, else print the calls and change nothing)",
    )
    p.add_argument(
        "--catalog",
        metavar="NAME",
        type=text("a catalog's name"),
        help=f"the catalog's name, the REST prefix (default: ${CATALOG_ENV})",
    )
    return p


def cmd_restore(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=False)
    task = find_task(store, args.task_id, args.realm, settings.metastore.realm_list())
    target = RestTarget.from_env(args.rest_uri, args.catalog)
    resolver = StorageResolver(storage_config(settings))
    result = restore(store, resolver, target, task, args.new_name, settings.storage.deletion_record)
    for line in result.lines:
        print(line, file=out)
    return EXIT_OK
