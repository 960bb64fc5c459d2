"""``tasks restore``: bring a dropped table back from its last metadata (``restore/``)."""

from __future__ import annotations

import argparse
from typing import TextIO

from polaris_pipeline.cli.context import (
    EXIT_OK,
    checked_metastore,
    find_task,
    settings_for,
    storage_config,
)
from polaris_pipeline.restore.register import RestTarget
from polaris_pipeline.restore.restore import restore
from polaris_pipeline.storage.resolve import StorageResolver


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
