"""``leaks``: the table roots under the catalogs' locations that nothing owns (read-only),
and ``leaks --reclaim ROOT``: delete one of them on the operator's word."""

from __future__ import annotations

import argparse
from typing import TextIO

from polaris_pipeline.cli.context import (
    EXIT_OK,
    EXIT_TASK_FAILED,
    checked_metastore,
    settings_for,
    storage_config,
)
from polaris_pipeline.cli.output import dump_json
from polaris_pipeline.cli.table import Column, output_width, render
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.report.formatting import format_bytes, truncate
from polaris_pipeline.report.leaks_view import catalog_heading, report_json, root_cells
from polaris_pipeline.storage.resolve import StorageResolver

ROOT_COLUMNS = (
    Column("ROOT", min_width=24),
    Column("KIND"),
    Column("OBJECTS"),
    Column("SIZE"),
    Column("NEWEST OBJECT", drop=3),
    Column("UUID", min_width=8, max_width=36, drop=1),
    Column("DROPPED", min_width=10, drop=2),
    Column("PROBLEM", min_width=10, drop=4),
)


def cmd_leaks(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    store = checked_metastore(settings, read_only=True)
    resolver = StorageResolver(storage_config(settings))
    report = metastore_leaks(store, resolver, realms=settings.realm_list(), catalogs=args.catalogs)
    if args.json:
        dump_json(report_json(report), out)
        return EXIT_OK
    width = output_width(out)
    if not report.catalogs:
        print("no catalogs found", file=out)
    for leaks in report.catalogs:
        heading = catalog_heading(leaks)
        print(truncate(heading, width) if width else heading, file=out)
        for error in leaks.errors:
            print(f"  error: {error}", file=out)
        if leaks.roots:
            rendered = render(ROOT_COLUMNS, [root_cells(r) for r in leaks.roots], width)
            print("\n".join("  " + line for line in rendered.lines), file=out)
        if leaks.not_tables_total:
            print(
                f"  not a table: {leaks.not_tables_total} director(y/ies) of loose files", file=out
            )
            for n in leaks.not_tables:
                print(f"    {n.uri} ({n.objects} object(s), {format_bytes(n.bytes)})", file=out)
    print(
        f"\n{report.roots} leaked root(s), {format_bytes(report.leaked_bytes)}"
        + (" (PARTIAL: a listing failed)" if report.partial else ""),
        file=out,
    )
    return EXIT_TASK_FAILED if report.partial else EXIT_OK
