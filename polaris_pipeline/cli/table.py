"""Plain-text tables that fit the terminal they are printed on, drawn by ``rich``.

A column is either whole (ids, roots, locations: never cut, an operator copies
them) or flexible (names, errors: cut with an ellipsis down to a minimum width).
When even the minimums do not fit, columns are dropped in their ``drop`` order:
empty ones (or one value throughout) first, then the least useful, and the
table's footer says which. When the whole columns alone do not fit, the table
becomes one record per block (``HEADER  value`` lines), every value whole.
With no width (piped, or a terminal that reports 0 columns) every row is whole.

The widths are decided here, not by rich: its own layout, given a narrow console,
shrinks a no-wrap column to nothing and drops it without a word. Rich draws the
rows at the widths given and measures each value by its cells (a wide character
takes two), which is what a terminal shows.
"""

from __future__ import annotations

import io
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

GAP = 2
# No edges, no lines between rows: only a rule of dashes under the header.
_RULE_UNDER_HEADER = box.Box("    \n    \n--  \n    \n    \n    \n    \n    \n", ascii=True)


@dataclass(frozen=True)
class Column:
    header: str
    # None: never cut (an operator copies it). Else cut with an ellipsis, to no fewer
    # than this many characters.
    min_width: int | None = None
    # Longest a value is shown even on a wide terminal (with no width, values are whole).
    max_width: int | None = None
    # Dropped when the table does not fit, lowest first; None: never dropped.
    drop: int | None = None
    # When every row has the same value, dropping it loses nothing the footer cannot say.
    same_is_free: bool = False


def output_width(stream: TextIO) -> int | None:
    """The width to fit: ``$COLUMNS`` when set, else the terminal's; None when piped or
    when the terminal does not know its size (it reports 0 columns: ``script``, some CI)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        pass
    return None


def wrapped(text: str, width: int | None, head: str = "") -> str:
    """``head`` and ``text`` wrapped to ``width`` between words, continuation lines under
    the text's start; a word longer than the width (a path, an id) stays whole on its line."""
    if width is None:
        return head + text
    return textwrap.fill(
        text,
        width,
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_long_words=False,
        break_on_hyphens=False,
    )


@dataclass(frozen=True)
class Rendered:
    lines: list[str]
    hidden: list[str]  # headers of the columns dropped to fit
    blocks: bool = False  # one record per block: the columns did not fit side by side


def _flat(text: str) -> str:
    return " ".join(text.split())


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> Rendered:
    """The header, a rule and the rows, aligned, at most ``width`` cells each (no limit
    when None), or one record per block when the whole columns alone exceed ``width``."""
    cells = [[_flat(c) for c in row] for row in rows]
    natural = []
    for i, col in enumerate(columns):
        longest = max([cell_len(col.header), *(cell_len(r[i]) for r in cells)])
        # No width (piped, or a terminal of no size): every value whole.
        cut_at = col.max_width if col.min_width is not None and width is not None else None
        natural.append(min(longest, cut_at) if cut_at else longest)

    def least(index: int) -> int:
        col = columns[index]
        if col.min_width is None:
            return natural[index]
        return min(natural[index], max(cell_len(col.header), col.min_width))

    def total(indices: list[int], widths: list[int]) -> int:
        return sum(widths[i] for i in indices) + GAP * (len(indices) - 1)

    keep = list(range(len(columns)))
    hidden: list[str] = []
    widths = list(natural)
    if width is not None:
        mins = [least(i) for i in range(len(columns))]
        # Free to drop first: columns with nothing in them, or one value in every row.
        free = {
            i
            for i in keep
            if cells
            and (
                all(not r[i] for r in cells)
                or (columns[i].same_is_free and len({r[i] for r in cells}) == 1)
            )
        }
        order = sorted(
            (i for i in keep if columns[i].drop is not None),
            key=lambda i: (i not in free, columns[i].drop or 0),
        )
        while total(keep, mins) > width and order:
            gone = order.pop(0)
            keep.remove(gone)
            hidden.append(columns[gone].header)
        if total(keep, mins) > width:
            return Rendered(_blocks(columns, cells, width), [], blocks=True)
        # Shrink the widest flexible column one cell at a time: long values give way
        # first, short ones stay whole.
        while total(keep, widths) > width:
            flexible = [i for i in keep if widths[i] > mins[i]]
            widest = max(flexible, key=lambda i: widths[i])
            widths[widest] -= 1
    table = Table(
        box=_RULE_UNDER_HEADER,
        show_edge=False,
        pad_edge=False,
        padding=(0, GAP - 1, 0, 0),
        header_style=None,
    )
    for i in keep:
        table.add_column(columns[i].header, width=widths[i], no_wrap=True, overflow="ellipsis")
    for row in cells:
        table.add_row(*(row[i] for i in keep))
    return Rendered(_draw(table, total(keep, widths)), hidden)


def _blocks(columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int) -> list[str]:
    """Each row as ``HEADER  value`` lines (empty values left out), wrapped between words,
    a blank line between rows."""
    key_width = max(cell_len(c.header) for c in columns)
    lines: list[str] = []
    for n, row in enumerate(cells):
        if n:
            lines.append("")
        for col, value in zip(columns, row, strict=True):
            if value:
                head = col.header.ljust(key_width) + "  "
                lines += wrapped(value, width, head).splitlines()
    return lines


def _draw(table: Table, width: int) -> list[str]:
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system=None,
        force_terminal=False,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
    )
    console.print(table)
    return [line.rstrip() for line in buffer.getvalue().splitlines()]
