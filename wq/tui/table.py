"""DataTable helpers: update rows in place, keeping the cursor item and what is on screen."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from rich.cells import cell_len
from rich.markup import escape
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import RowDoesNotExist, RowKey

from wq.cli.common import printable

# Removing a row renumbers every row after it, so past this many removals at once a
# rebuild is cheaper than removing them one by one.
MAX_REMOVALS = 20


class RowTable(DataTable[Any]):
    """A table of rows with the keys terminal users expect besides the arrows: vi's
    `j`/`k`, and `g`/`G` or Home/End for the first and last row (DataTable's own
    Home/End scroll sideways)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("g,home", "scroll_top", "First", show=False),
        Binding("G,end", "scroll_bottom", "Last", show=False),
    ]

    # The column widths as last measured: the lines cached since were drawn with them.
    _drawn_widths: tuple[int, ...] = ()

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """DataTable's measuring, then, if the columns changed width, a redraw.

        A DataTable widens its columns for new rows and cells only when it is next idle
        (here), and caches the lines it draws under keys that leave the widths out. A
        frame drawn in between (the screen's refresh timer or a resize, on other tasks)
        cut the rows to the old widths, and nothing drew them again: a quiet Overview
        read `all` for `all quiet` until a key was pressed.
        """
        super()._update_dimensions(new_rows)
        widths = tuple(column.content_width for column in self.ordered_columns)
        if widths != self._drawn_widths:
            self._drawn_widths = widths
            self.notify_style_update()  # drops the cached lines (public) and redraws


class KeyedCell(str):
    """A row's first cell, which knows its row's key: `DataTable.sort` gives its key
    function cell values only, and `fill` sorts by the order the caller wants."""

    row_key: str

    def __new__(cls, text: str, row_key: str) -> KeyedCell:
        cell = super().__new__(cls, text)
        cell.row_key = row_key
        return cell


def selected_key(table: DataTable[Any]) -> str | None:
    """The key of the row under the cursor, or None for an empty table."""
    if not table.row_count:
        return None
    value = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    return str(value) if value is not None else None


def key_at(table: DataTable[Any], row: int) -> str | None:
    """The key of the row at index `row`, or None past the end (no O(rows) list built)."""
    if not 0 <= row < table.row_count:
        return None
    value = table.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value
    return str(value) if value is not None else None


def visible_keys(table: DataTable[Any]) -> list[str]:
    """The keys of the rows on screen (and of the cursor row), top to bottom."""
    top = int(table.scroll_y)
    found = [key_at(table, row) for row in range(top, top + max(1, table.size.height))]
    found.append(selected_key(table))
    return [key for key in found if key is not None]


class _Anchor:
    """Where the user is: the cursor's item and the item in the top line on screen."""

    def __init__(self, table: DataTable[Any]) -> None:
        self.cursor_key = selected_key(table)
        self.cursor_row = table.cursor_row
        self.scroll_x, self.scroll_y = table.scroll_x, table.scroll_y
        top = int(table.scroll_y)
        self.top_key = key_at(table, top) if top > 0 else None

    def restore(self, table: DataTable[Any]) -> None:
        """The cursor back on its item; scrolled so the same item heads the screen.

        At the very top the view stays at the top, so new items come into sight (the
        cursor still moves with its item, and is scrolled to if it left the screen).
        """
        if not table.row_count:
            return
        target = _index(table, self.cursor_key)
        if target is None:  # the row is gone: stay at the same height
            target = min(self.cursor_row, table.row_count - 1)
        scroll_y = self.scroll_y
        top = _index(table, self.top_key)
        if top is not None:
            scroll_y = top + (self.scroll_y - int(self.scroll_y))
        table.scroll_to(self.scroll_x, scroll_y, animate=False, immediate=True)
        # Moving the cursor also scrolls it into view, should it be off screen now.
        table.move_cursor(row=target, animate=False, scroll=False)


def _index(table: DataTable[Any], key: str | None) -> int | None:
    if key is None:
        return None
    try:
        return table.get_row_index(key)
    except RowDoesNotExist:
        return None


@contextlib.contextmanager
def keep_cursor(table: DataTable[Any]) -> Iterator[None]:
    """Around a rebuild: the cursor back on the same row (by key), the same rows on screen."""
    anchor = _Anchor(table)
    yield
    anchor.restore(table)


# What `fill` last put in each table, row by row: comparing with it is cheaper than
# reading the cells back out of the table.
_shown: WeakKeyDictionary[DataTable[Any], dict[str, Sequence[str]]] = WeakKeyDictionary()


def shown_as(cell: str) -> str:
    """A cell as the table takes it: a DataTable reads a string as markup, and the
    server's text (a project `a[/b]`, an error with escape sequences) is plain text."""
    return escape(printable(cell))


def fill(
    table: DataTable[Any], rows: Sequence[tuple[str, Sequence[str]]], *, narrow: bool = False
) -> None:
    """Show `rows` (key, cells; the caller must not change a sequence once passed) in
    `table`, in that order, with the cursor on its item and the screen where it was.

    Only what differs from the last call is touched: changed cells are updated, new
    rows added and put in place by one sort, rows that left removed. Nothing else is
    re-measured or re-rendered, so a refresh of a table of thousands of rows costs
    about what changed. A table filled otherwise, or losing many rows, is rebuilt.

    A DataTable's columns only ever widen. `narrow` (for short tables): a column wider
    than its header and its widest cell now is made narrow again, by a rebuild.
    """
    if narrow and _too_wide(table, rows):
        headers = [(column.label, column_key.value) for column_key, column in table.columns.items()]
        table.clear(columns=True)
        for label, name in headers:
            table.add_column(label, key=name)
        forget(table)
    shown = _shown.get(table)
    wanted = dict(rows)
    if len(wanted) < len(rows):
        # A key given twice (a server's list repeating a row): the first is shown; a
        # table refuses a second row of the same key, and the view would die of it.
        wanted = {}
        for key, cells in rows:
            wanted.setdefault(key, cells)
        rows = list(wanted.items())
    if shown is None:
        _rebuild(table, rows)
        return
    removed = [key for key in shown if key not in wanted]
    if len(removed) > MAX_REMOVALS:
        _rebuild(table, rows)
        return
    anchor = _Anchor(table)
    for key in removed:
        table.remove_row(key)
    columns = list(table.columns)
    added: list[str] = []
    for key, cells in rows:
        before = shown.get(key)
        if before is None:
            table.add_row(*_keyed(key, cells), key=key)
            added.append(key)
        elif before is not cells and before != cells:
            _update(table, key, columns, before, cells)
    order = [key for key, _ in rows]
    moved = [key for key in shown if key in wanted] + added != order
    if moved:
        position = {key: index for index, key in enumerate(order)}
        table.sort(columns[0], key=lambda cell: position[cell.row_key])
    if removed or added or moved:
        anchor.restore(table)
    _shown[table] = wanted


def _too_wide(table: DataTable[Any], rows: Sequence[tuple[str, Sequence[str]]]) -> bool:
    for index, column in enumerate(table.columns.values()):
        widest = max(
            [cell_len(column.label.plain)]
            + [cell_len(printable(cells[index])) for _, cells in rows if index < len(cells)]
        )
        if column.content_width > widest:
            return True
    return False


def _keyed(key: str, cells: Sequence[str]) -> list[str]:
    shown = [shown_as(cell) for cell in cells]
    return [KeyedCell(shown[0], key), *shown[1:]] if shown else []


def _update(
    table: DataTable[Any],
    key: str,
    columns: list[Any],
    before: Sequence[str],
    cells: Sequence[str],
) -> None:
    for index, (column, old, new) in enumerate(zip(columns, before, cells, strict=True)):
        if old == new:
            continue
        value = KeyedCell(shown_as(new), key) if index == 0 else shown_as(new)
        # Widen a column for a longer value; never narrow one (narrowing re-measures
        # every cell of the column, and columns that keep their width do not jump).
        wider = cell_len(printable(new)) > table.columns[column].content_width
        table.update_cell(key, column, value, update_width=wider)


def _rebuild(table: DataTable[Any], rows: Sequence[tuple[str, Sequence[str]]]) -> None:
    with keep_cursor(table):
        table.clear()
        for key, cells in rows:
            table.add_row(*_keyed(key, cells), key=key)
    _shown[table] = dict(rows)


def forget(table: DataTable[Any]) -> None:
    """After `clear(columns=True)`: the next `fill` rebuilds."""
    _shown.pop(table, None)
