"""DataTable helpers: keep the cursor row and the scroll position across a refresh."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist


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
