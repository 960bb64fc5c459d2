"""``leaks``: the table roots under the catalogs' locations that nothing owns (read-only),
and ``leaks --reclaim ROOT``: delete one of them on the operator's word."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TextIO

from polaris_pipeline.cli.context import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_TASK_FAILED,
    checked_metastore,
    settings_for,
    storage_config,
    warn_if_unbounded,
)
from polaris_pipeline.cli.output import dump_json
from polaris_pipeline.cli.table import Column, output_width, render, wrapped
from polaris_pipeline.errors import PolarisPipelineError
from polaris_pipeline.leaks.catalogs import read_catalogs
from polaris_pipeline.leaks.find import metastore_leaks
from polaris_pipeline.leaks.model import CatalogRef
from polaris_pipeline.leaks.reclaim import check_min_age_days, holding_catalog, reclaim_root
from polaris_pipeline.metastore import Metastore
from polaris_pipeline.report.leaks_view import (
    catalog_heading,
    reclaim_json,
    reclaim_line,
    report_json,
    root_cells,
)
from polaris_pipeline.settings import PipelineSettings
from polaris_pipeline.storage.resolve import StorageResolver
from polaris_pipeline.storage.uri import parse_location
from polaris_pipeline.tasks.formatting import format_bytes


def _reclaim(
    args: argparse.Namespace,
    settings: PipelineSettings,
    store: Metastore,
    resolver: StorageResolver,
    out: TextIO,
) -> int:
    min_age_ms = check_min_age_days(settings.leaks.min_age_days)
    report = reclaim_root(
        store,
        resolver,
        args.reclaim,
        min_age_ms=min_age_ms,
        deletion_record=settings.storage.deletion_record,
    )
    if args.json:
        dump_json(reclaim_json(report), out)
    else:
        print(reclaim_line(report), file=out)
        for uri, error in report.failed.items():
            print(f"  failed: {uri}: {error}", file=out)
    if report.refusal is not None and not report.deleted:
        return EXIT_ERROR
    return EXIT_OK if report.ok else EXIT_TASK_FAILED


INDENT = "  "  # a catalog's roots, under its heading
ROOT_COLUMNS = (
    # Never cut: `--reclaim ROOT` takes it as printed.
    Column("ROOT"),
    Column("KIND"),
    Column("OBJECTS"),
    Column("SIZE"),
    Column("NEWEST OBJECT", drop=3),
    Column("UUID", min_width=8, max_width=36, drop=1),
    Column("DROPPED", min_width=10, drop=2),
    Column("PROBLEM", min_width=10, drop=4),
)


NAMES_SHOWN = 20


def _names(values: Sequence[str]) -> str:
    shown = sorted(set(values))
    more = f" and {len(shown) - NAMES_SHOWN} more" if len(shown) > NAMES_SHOWN else ""
    return ", ".join(shown[:NAMES_SHOWN]) + more if shown else "none"


def check_filters(
    catalogs: list[CatalogRef], realms: Sequence[str] | None, names: Sequence[str] | None
) -> list[CatalogRef]:
    """The catalogs of ``realms`` named ``names`` (None: all); PolarisPipelineError
    naming what exists when a realm or a catalog name matches none (a clean "0 leaked
    roots" would read as a clean bill of health)."""
    if realms:
        unknown = [r for r in realms if not any(c.realm_id == r for c in catalogs)]
        if unknown:
            raise PolarisPipelineError(
                f"--realm {', '.join(unknown)}: no catalog in that realm; realms with "
                f"catalogs: {_names([c.realm_id for c in catalogs])}"
            )
        catalogs = [c for c in catalogs if c.realm_id in realms]
    if names:
        unknown = [n for n in names if not any(c.name == n for c in catalogs)]
        if unknown:
            where = f" of realm(s) {', '.join(realms)}" if realms else ""
            raise PolarisPipelineError(
                f"--catalog {', '.join(unknown)}: no such catalog{where}; catalogs: "
                f"{_names([c.name for c in catalogs])}"
            )
        catalogs = [c for c in catalogs if c.name in names]
    return catalogs


def _check_reclaim_filters(args: argparse.Namespace, chosen: list[CatalogRef]) -> None:
    """``--reclaim ROOT`` with --realm or --catalog: the root must lie under a chosen
    catalog's location (a filter that leaves it out is a mistake, not a scope)."""
    try:
        root = parse_location(args.reclaim, directory=True)
    except ValueError:
        return  # the reclaim itself refuses it, saying why
    holder = holding_catalog(chosen, root)
    if holder is None:
        raise PolarisPipelineError(
            f"--reclaim {args.reclaim}: not under the locations of the catalogs --realm and "
            f"--catalog choose ({_names([c.name for c in chosen])}); not reclaimed"
        )


def cmd_leaks(args: argparse.Namespace, out: TextIO) -> int:
    settings = settings_for(args)
    # Read-only even to reclaim: a reclaim deletes files and writes no row.
    store = checked_metastore(settings, read_only=True)
    realms = settings.metastore.realm_list()
    catalogs = settings.leaks.catalogs
    if realms or catalogs:
        chosen = check_filters(read_catalogs(store.engine), realms, catalogs)
        if args.reclaim is not None:
            _check_reclaim_filters(args, chosen)
    config = storage_config(settings)
    resolver = StorageResolver(config)
    if args.reclaim is not None:
        warn_if_unbounded(config)
        return _reclaim(args, settings, store, resolver, out)
    report = metastore_leaks(store, resolver, realms=realms, catalogs=catalogs)
    # A partial report exits 1 in either form: a script must not read it as whole.
    status = EXIT_TASK_FAILED if report.partial else EXIT_OK
    if args.json:
        dump_json(report_json(report), out)
        return status
    width = output_width(out)
    if not report.catalogs:
        print("no catalogs found", file=out)
    for leaks in report.catalogs:
        print(wrapped(catalog_heading(leaks), width), file=out)
        for error in leaks.errors:
            print(f"  error: {error}", file=out)
        if leaks.roots:
            cells = [root_cells(r) for r in leaks.roots]
            rendered = render(ROOT_COLUMNS, cells, width - len(INDENT) if width else None)
            print("\n".join(INDENT + line if line else "" for line in rendered.lines), file=out)
        if leaks.not_tables_total:
            count = leaks.not_tables_total
            noun = "directory" if count == 1 else "directories"
            print(wrapped(f"not a table: {count} {noun} of loose files", width, INDENT), file=out)
            for n in leaks.not_tables:
                text = f"{n.uri} ({n.objects} object(s), {format_bytes(n.bytes)})"
                print(wrapped(text, width, INDENT * 2), file=out)
    print(
        f"\n{report.roots} leaked root(s), {format_bytes(report.leaked_bytes)}"
        + (" (PARTIAL: a listing failed)" if report.partial else ""),
        file=out,
    )
    return status
