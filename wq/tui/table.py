"""DataTable helpers: keep the cursor row and the scroll position across a refresh."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any
from weakref import WeakKeyDictionary

from rich.markup import escape
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist

from wq.cli.output import printable


def selected_key(table: DataTable[Any]) -> str | None:
    """The key of the row under the cursor, or None for an empty table."""
    if not table.row_count:
        return None
    value = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    return str(value) if value is not None else None


@contextlib.contextmanager
def keep_cursor(table: DataTable[Any]) -> Iterator[None]:
    """Around a rebuild: put the cursor back on the same row (by key) and the same scroll."""
    key = selected_key(table)
    row = table.cursor_row
    scroll_x, scroll_y = table.scroll_x, table.scroll_y
    yield
    if not table.row_count:
        return
    try:
        target = table.get_row_index(key) if key is not None else row
    except RowDoesNotExist:  # the row is gone: stay at the same height
        target = min(row, table.row_count - 1)
    table.move_cursor(row=target, animate=False, scroll=False)
    table.scroll_to(scroll_x, scroll_y, animate=False, immediate=True)


# What `fill` last put in each table, row by row: comparing with it is cheaper than
# reading the cells back out of the table.
_shown: WeakKeyDictionary[DataTable[Any], dict[str, list[str]]] = WeakKeyDictionary()


def shown_as(cell: str) -> str:
    """A cell as the table takes it: a DataTable reads a string as markup, and the
    server's text (a project `a[/b]`, an error with escape sequences) is plain text."""
    return escape(printable(cell))


def fill(table: DataTable[Any], rows: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Show `rows` (key, cells) in `table`, the cursor and the scroll kept.

    A refresh that brings the same rows in the same order (nothing arrived or left)
    updates only the cells that changed: no rebuild and no re-measuring of every cell,
    which keeps the refresh of thousands of loaded rows cheap. Anything else rebuilds
    the rows inside `keep_cursor`.
    """
    shown = _shown.get(table)
    if shown is not None and list(shown) == [key for key, _ in rows]:
        columns = list(table.columns)
        for key, cells in rows:
            before = shown[key]
            if before == cells:
                continue
            for column, old, new in zip(columns, before, cells, strict=True):
                if old != new:
                    table.update_cell(key, column, shown_as(new), update_width=True)
    else:
        with keep_cursor(table):
            table.clear()
            for key, cells in rows:
                table.add_row(*map(shown_as, cells), key=key)
    _shown[table] = {key: list(cells) for key, cells in rows}


def forget(table: DataTable[Any]) -> None:
    """After `clear(columns=True)`: the next `fill` rebuilds."""
    _shown.pop(table, None)
