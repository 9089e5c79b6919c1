"""The Items view: filtered by the API, `/` text filter, one column per dimension.

Filters (type, phase, project, admission) go to the server; the list follows the API's
cursor one page at a time as the cursor nears the end, and a refresh reloads as many
items as are loaded, so the rows under the cursor stay put.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header

from wq.tui.format import dimension_header, dimension_label, dimension_mark, short, short_id
from wq.tui.polling import PollingScreen
from wq.tui.status import StatusLine
from wq.tui.table import fill, forget, keep_cursor, selected_key

PAGE = 100
FIXED = ("id", "type", "project", "phase", "admission", "attempts")


@dataclass
class ItemsData:
    """One poll's items, the filters they were fetched with, and whether more exist."""

    items: list[dict[str, Any]]
    filters: dict[str, str]
    more: bool


class ItemsScreen(PollingScreen):
    """Work items, newest first."""

    BINDINGS = [  # noqa: RUF012
        Binding("enter", "open", "Detail"),
        Binding("f", "server_filters", "Filters"),
        Binding("slash", "text_filter", "Find", key_display="/"),
        Binding("r", "retry", "Retry"),
        Binding("c", "cancel", "Cancel"),
        Binding("y", "copy", "Copy id"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.want = PAGE
        self.items: list[dict[str, Any]] = []
        self.filters: dict[str, str] = {}
        self.text = ""
        self.more = False
        self.dimensions: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="items", cursor_type="row", zebra_stripes=True)
        yield StatusLine()
        yield Footer()

    def fetch(self) -> ItemsData:
        filters = dict(self.wq.filters)
        want = self.want if filters == self.filters else PAGE
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        more = False
        while len(found) < want:
            page = self.wq.api.items_page(
                limit=min(500, want - len(found)), cursor=cursor, **filters
            )
            found += page["items"]
            cursor = page.get("next_cursor")
            more = bool(cursor)
            if not cursor:
                break
        return ItemsData(found, filters, more)

    def show(self, data: ItemsData) -> None:
        if data.filters != self.filters:
            self.want = PAGE
            self.filters = data.filters
        self.items, self.more = data.items, data.more
        self.render_rows()

    def shown_items(self) -> list[dict[str, Any]]:
        """The loaded items that match the `/` text."""
        if not self.text:
            return self.items
        needle = self.text.lower()
        return [
            item
            for item in self.items
            if any(
                needle in str(item.get(key) or "").lower()
                for key in ("id", "type", "project", "phase", "admission", "error")
            )
        ]

    def render_rows(self) -> None:
        """Rebuild the table from `items` (columns change with the dimensions seen)."""
        table = self.query_one("#items", DataTable)
        rows = self.shown_items()
        dimensions = sorted({dimension_label(d) for item in rows for d in item["dimensions"]})
        if dimensions != self.dimensions or not table.columns:
            with keep_cursor(table):
                table.clear(columns=True)
                forget(table)
                for column in FIXED:
                    table.add_column(column, key=column)
                for name in dimensions:
                    table.add_column(dimension_header(name), key=name)
                table.add_column("last error", key="last error")
                self.dimensions = dimensions
                fill(table, self.cells(rows, dimensions))
        else:
            fill(table, self.cells(rows, dimensions))
        described = " ".join(f"{key}={value}" for key, value in sorted(self.filters.items()))
        shown = f"{len(rows)}/{len(self.items)}" if self.text else str(len(self.items))
        self.status.note(
            f"{shown} items{' (more below)' if self.more else ''}"
            f"{'  filters: ' + described if described else ''}"
            f"{'  /' + self.text if self.text else ''}"
        )

    def cells(
        self, rows: list[dict[str, Any]], dimensions: list[str]
    ) -> list[tuple[str, list[str]]]:
        """The table's rows: fixed columns, one mark per dimension, the last error."""
        now = self.wq.now()
        found = []
        for item in rows:
            marks = {dimension_label(d): dimension_mark(d, now) for d in item["dimensions"]}
            cells = [
                short_id(item["id"]),
                item["type"],
                item["project"],
                item["phase"],
                item["admission"],
                str(item["attempts"]),
                *(marks.get(name, "") for name in dimensions),
                short(item.get("error"), 40),
            ]
            found.append((str(item["id"]), cells))
        return found

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # Near the end of what is loaded: ask for the next page of the API's cursor.
        if self.more and event.cursor_row >= event.data_table.row_count - 5:
            self.want = len(self.items) + PAGE
            self.more = False
            self.schedule(0)

    def current(self) -> dict[str, Any] | None:
        """The item under the cursor."""
        key = selected_key(self.query_one("#items", DataTable))
        return next((item for item in self.items if item["id"] == key), None)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # The table's own `enter` binding selects the row: that is what opens it.
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        """The detail of the item under the cursor."""
        item = self.current()
        if item is not None:
            self.wq.open_item(item["id"])

    def action_server_filters(self) -> None:
        """The `:` line, prefilled with this view's server filters, to edit them."""
        current = " ".join(f"{key}={value}" for key, value in sorted(self.wq.filters.items()))
        self.wq.prompt(":", f"items all {current}".rstrip(), self.wq.run_command)

    def action_text_filter(self) -> None:
        """Ask for the `/` text."""

        def apply(text: str | None) -> None:
            if text is not None:
                self.text = text.strip()
                self.render_rows()

        self.wq.prompt("/", self.text, apply)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("retry", "cancel"):
            return self.wq.may_retry()
        return True

    def action_retry(self) -> None:
        """Retry the item under the cursor, after confirmation."""
        item = self.current()
        if item is not None:
            self.wq.confirm_retry(item, done=lambda: self.schedule(0))

    def action_cancel(self) -> None:
        """Cancel the item under the cursor, after confirmation."""
        item = self.current()
        if item is not None:
            self.wq.confirm_cancel(item, done=lambda: self.schedule(0))

    def action_copy(self) -> None:
        """Copy the id of the item under the cursor."""
        item = self.current()
        if item is not None:
            self.wq.copy_id(item["id"])
