"""The Items view's rows: an item's cells, and the widths its text columns get.

A row is computed when its item comes from the server; its cells for the current
dimension columns and widths are built once and reused, so that `wq.tui.table.fill`
skips a row whose cells are the very list it was given last time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.cells import cell_len

from wq.cli.common import printable
from wq.client.shown import attempts as attempts_shown
from wq.tui.format import (
    age,
    dimension_header,
    dimension_label,
    dimension_mark,
    last_line,
    short,
    short_id,
    short_middle,
)
from wq.tui.widths import give_way, widest

FIXED = ("id", "type", "project", "phase", "admission", "since", "attempts")
PROJECT = FIXED.index("project")
# Not `last error`: a column's header is the least it takes, and a list whose errors are
# all `-` would hold ten cells the project needs.
ERROR = "error"
# The two columns that give way on a narrow terminal (`wq.tui.widths`): the project is
# cut in the middle, the error at its end; the error's last line shows up to this width.
ERROR_WIDTH = 40
MARK = "▶"


@dataclass
class Row:
    """An item's cells, computed when the item last came from the server."""

    fixed: list[str]  # the project whole
    marks: dict[str, str]
    error: str  # the last line of the error, whole
    widths: list[int]  # of the fixed cells, for the column widths
    cells: list[str] | None = None  # for the current dimension columns and widths


def item_row(item: dict[str, Any], now: datetime, *, marked: bool) -> Row:
    """The row of `item` (`marked`: its id is led by a mark)."""
    fixed = [
        (MARK if marked else "") + short_id(item["id"]),
        item["type"],
        str(item["project"]),
        item["phase"],
        item["admission"],
        age(item.get("updated_at"), now=now),
        attempts_shown(item),
    ]
    error = last_line(item.get("error"))
    return Row(
        fixed=fixed,
        marks={dimension_label(d): dimension_mark(d, now) for d in item["dimensions"]},
        error=" ".join(error.split()) if error else "-",
        widths=[cell_len(printable(cell)) for cell in fixed],
    )


def cells(row: Row, dimensions: list[str], fitted: tuple[int, int]) -> list[str]:
    """The row's cells for these dimension columns and (project, error) widths; the
    caller clears `row.cells` when either changes."""
    if row.cells is None:
        project, error = fitted
        fixed = list(row.fixed)
        fixed[PROJECT] = short_middle(fixed[PROJECT], project)
        row.cells = [
            *fixed,
            *(row.marks.get(name, "") for name in dimensions),
            short(row.error, error),
        ]
    return row.cells


def fit(rows: list[Row], dimensions: list[str], room: int) -> tuple[int, int]:
    """The widths of the project and error columns in a table `room` cells wide: what
    the other columns, never cut, leave (`wq.tui.widths.give_way`)."""
    fixed = [widest([], name) for name in FIXED]
    for row in rows:
        fixed = [max(pair) for pair in zip(fixed, row.widths, strict=True)]
    del fixed[PROJECT]
    # Measured by their headers, as the table shows them (not `needs_...`).
    marks = [
        widest((row.marks.get(name, "") for row in rows), dimension_header(name))
        for name in dimensions
    ]
    projects = widest((row.fixed[PROJECT] for row in rows), "project")
    errors = min(ERROR_WIDTH, widest((row.error for row in rows), ERROR))
    project, error = give_way(
        room,
        [*fixed, *marks],
        [(widest([], "project"), projects), (widest([], ERROR), errors)],
    )
    return project, error
