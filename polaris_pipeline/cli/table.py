"""Plain-text tables that fit the terminal they are printed on.

A column is either fixed (ids, states: never cut, an operator copies them) or
flexible (names, errors: cut with an ellipsis down to a minimum width). When
even the minimums do not fit, columns are dropped in their ``drop`` order:
empty ones (or one value throughout) first, then the least useful, and the
table's footer says which.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from polaris_pipeline.tasks.formatting import truncate

GAP = "  "


@dataclass(frozen=True)
class Column:
    header: str
    # None: never cut. Else cut with an ellipsis, to no fewer than this many characters.
    min_width: int | None = None
    # Longest a value is shown even on a wide terminal.
    max_width: int | None = None
    # Dropped when the table does not fit, lowest first; None: never dropped.
    drop: int | None = None
    # When every row has the same value, dropping it loses nothing the footer cannot say.
    same_is_free: bool = False


def output_width(stream: TextIO) -> int | None:
    """The width to fit: ``$COLUMNS`` when set, else the terminal's; None when piped."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return None


@dataclass(frozen=True)
class Rendered:
    lines: list[str]
    hidden: list[str]  # headers of the columns dropped to fit


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> Rendered:
    """The header, a rule and the rows, aligned, at most ``width`` characters each."""
    cells = [[" ".join(c.split()) for c in row] for row in rows]
    natural = []
    for i, col in enumerate(columns):
        longest = max([len(col.header), *(len(r[i]) for r in cells)])
        natural.append(min(longest, col.max_width) if col.max_width else longest)
    keep = list(range(len(columns)))
    hidden: list[str] = []

    def least(index: int) -> int:
        col = columns[index]
        floor = max(len(col.header), col.min_width) if col.min_width is not None else natural[index]
        return min(natural[index], floor)

    def total(indices: list[int], widths: list[int]) -> int:
        return sum(widths[i] for i in indices) + len(GAP) * (len(indices) - 1)

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
    widths = list(natural)
    if width is not None:
        # Shrink the widest flexible column one character at a time: long values
        # give way first, short ones stay whole.
        while total(keep, widths) > width:
            flexible = [
                i for i in keep if columns[i].min_width is not None and widths[i] > least(i)
            ]
            if not flexible:
                break
            widest = max(flexible, key=lambda i: widths[i])
            widths[widest] -= 1

    def line(values: Sequence[str]) -> str:
        text = GAP.join(truncate(values[i], widths[i]).ljust(widths[i]) for i in keep).rstrip()
        return truncate(text, width) if width is not None else text

    lines = [line([c.header for c in columns]), GAP.join("-" * widths[i] for i in keep)]
    if width is not None:
        lines[1] = lines[1][:width]
    lines += [line(r) for r in cells]
    return Rendered(lines, hidden)
