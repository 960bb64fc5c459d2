"""``polaris-pipeline guard-indexes``: create (or, with ``--check``, list) the indexes the
shared-location guards look up by, which Polaris's schema lacks (``metastore/guard_indexes.py``)."""

from __future__ import annotations

import argparse
from typing import TextIO

from polaris_pipeline.cli.context import (
    EXIT_OK,
    EXIT_TASK_FAILED,
    checked_metastore,
    settings_for,
)
from polaris_pipeline.metastore.guard_indexes import create_guard_indexes, missing_guard_indexes


def cmd_guard_indexes(args: argparse.Namespace, out: TextIO) -> int:
    store = checked_metastore(settings_for(args), read_only=args.check)
    version = store.check_schema()
    if args.check:
        missing = missing_guard_indexes(store.engine, version)
        for index in missing:
            print(f"missing: {index.name} ({index.what})", file=out)
        if not missing:
            print(f"every guard index is in {store.display_url}", file=out)
        return EXIT_TASK_FAILED if missing else EXIT_OK
    created = create_guard_indexes(store.engine, version)
    for name in created:
        print(f"created {name} in {store.display_url}", file=out)
    if not created:
        print(f"every guard index was already in {store.display_url}", file=out)
    return EXIT_OK
