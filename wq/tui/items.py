"""The Items view: filtered by the API, `/` text filter, one column per dimension.

Filters (type, phase, project, admission) go to the server. The list follows the API's
cursor one page at a time as the cursor nears the end; a refresh fetches only the rows
a user can notice (the first page, the rows on screen and around the cursor, see
`wq.tui.itemlist`) and updates the table in place, so with thousands of rows loaded a
refresh costs about as much as with one page, and the cursor stays on its item.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header

from wq.client.cursors import item_key
from wq.client.shown import counted
from wq.tui.footer import FittingFooter
from wq.tui.format import dimension_header
from wq.tui.itemlist import MAX_PAGE, PAGE, Answer, ItemList, Span, fetch_spans
from wq.tui.itemrows import ERROR, FIXED, Row, cells, fit, item_row
from wq.tui.polling import PollingScreen
from wq.tui.status import Part, StatusLine
from wq.tui.table import RowTable, fill, forget, keep_cursor, selected_key, visible_keys
from wq.tui.widths import room

# From this many loaded items on, the heap is settled when the list doubles.
FREEZE_FROM = 1000
# The orders `s` steps through; None keeps the API's (newest first), which paging needs
# to load more: another order sorts only the loaded rows.
SORTS: list[tuple[str, Callable[[dict[str, Any]], Any] | None]] = [
    ("newest", None),
    ("time in state", lambda item: item.get("updated_at") or ""),
    ("phase", lambda item: item["phase"]),
    ("project", lambda item: item["project"]),
]
# Rows refreshed above and below those on screen: what a page key or two brings into view.
MARGIN = 40


@dataclass
class ItemsData:
    """One poll's answers, and the filters they were fetched with."""

    answers: list[Answer]
    filters: dict[str, str]
    # The server's matches of the `/` text (its first page), loaded or not.
    found: list[dict[str, Any]] = field(default_factory=list)


class ItemsScreen(PollingScreen):
    """Work items, newest first."""

    BINDINGS = [  # noqa: RUF012
        Binding("enter", "open", "Detail"),
        Binding("f", "server_filters", "Filters"),
        # Before the table's keys, as `:` (`WqApp`): what is typed behind it goes to the line.
        Binding("slash", "text_filter", "Find", key_display="/", priority=True),
        Binding("s", "sort", "Sort"),
        Binding("space", "mark", "Mark"),
        Binding("r", "retry", "Retry"),
        Binding("c", "cancel", "Cancel"),
        Binding("y", "copy", "Copy id"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.want = PAGE
        self.list = ItemList()
        self.rows: dict[str, Row] = {}
        self.filters: dict[str, str] = {}
        self.text = ""
        self.sort = SORTS[0][0]
        self.marked: set[str] = set()
        self.dimensions: list[str] = []
        self._spans: list[Span] = []
        self._planned_filters: dict[str, str] = {}
        self._planned_text = ""
        self._listings = 0  # the app's `listings` when this list was asked for
        self.found: list[dict[str, Any]] = []
        self._frozen_at = 0
        self.fitted: tuple[int, int] = (0, 0)  # the project's and the error's width

    @property
    def items(self) -> list[dict[str, Any]]:
        """The loaded items, newest first."""
        return self.list.items

    @property
    def more(self) -> bool:
        """More items exist below the loaded ones."""
        return self.list.more

    def compose(self) -> ComposeResult:
        yield Header()
        yield RowTable(id="items", cursor_type="row", zebra_stripes=True)
        yield StatusLine()
        yield FittingFooter()

    def prepare(self) -> None:
        # On the UI thread: which rows the user can see decides what the worker fetches.
        if self.wq.listings != self._listings:
            # Asked for anew (`:items`, the palette, enter in Pools or the Overview): a
            # `/` text typed for the list before would hide rows of this one, even
            # under `:items all`, so it goes, as a `:` command drops it in k9s.
            self._listings = self.wq.listings
            self.text = ""
        filters = dict(self.wq.filters)
        self._planned_filters = filters
        self._planned_text = self.text
        if filters != self.filters:
            self._spans = ItemList().plan([], PAGE)
            return
        index = {str(item["id"]): n for n, item in enumerate(self.items)}
        seen = [index[key] for key in visible_keys(self.table) if key in index]
        rows = []
        if seen:
            # Under a `/` filter the rows on screen can lie far apart in the list: past
            # one page of the API, the rows below go stale until scrolled to.
            start = min(seen) - MARGIN
            rows = [range(start, min(max(seen) + MARGIN + 1, start + MAX_PAGE))]
        self._spans = self.list.plan(rows, self.want)

    def fetch(self) -> ItemsData:
        filters = self._planned_filters

        def page(limit: int, cursor: str | None) -> Any:
            return self.wq.api.items_page(limit=limit, cursor=cursor, **filters)

        found = []
        if self._planned_text:
            # `/` looks on the server too, for what is not loaded.
            answer = self.wq.api.items_page(limit=PAGE, search=self._planned_text, **filters)
            found = list(answer.get("items", []))
        return ItemsData(fetch_spans(self._spans, page), filters, found)

    def show(self, data: ItemsData) -> None:
        new_list = data.filters != self.filters
        if new_list:  # start from its top
            self.want = PAGE
            self.filters = data.filters
            self.list = ItemList()
            self.rows = {}
        fresh = self.list.merge(data.answers)
        now = self.wq.now()
        # Only the items the answers brought get new cells (every new item is among them).
        for answer in data.answers:
            for item in answer.items:
                self.rows[str(item["id"])] = self._row(item, now)
        self.found = data.found
        for item in self.found:
            self.rows[str(item["id"])] = self._row(item, now)
        if len(self.rows) > 2 * len(self.items) + 2 * PAGE:  # forget rows of items that left
            loaded = {str(item["id"]) for item in (*self.items, *self.found)}
            self.rows = {key: row for key, row in self.rows.items() if key in loaded}
        self.render_rows(fresh)
        if new_list and self.table.row_count:
            # Its first row, not the row the old list's cursor was on.
            self.table.move_cursor(row=0, animate=False)
        self._settle_heap()

    def _settle_heap(self) -> None:
        # Thousands of loaded items are hundreds of thousands of objects, and every
        # full pass of Python's cyclic collector walks them all: a pause of 100-250 ms
        # every few refreshes. When the list has doubled, collect once and freeze what
        # is alive (`gc.freeze`), so later passes skip it; item documents hold no
        # cycles, so those that leave are still freed at once by reference counting.
        loaded = len(self.items)
        if loaded >= FREEZE_FROM and loaded >= 2 * self._frozen_at:
            gc.collect()
            gc.freeze()
            self._frozen_at = loaded

    @property
    def table(self) -> DataTable[Any]:
        """The items table."""
        return self.query_one("#items", DataTable)

    def shown_items(self) -> list[dict[str, Any]]:
        """The loaded items that match the `/` text, with the server's matches of it
        that are not loaded, newest first."""
        if not self.text:
            return self.items
        needle = self.text.lower()
        matched = [
            item
            for item in self.items
            if any(
                needle in str(item.get(key) or "").lower()
                for key in ("id", "type", "project", "phase", "admission", "error")
            )
        ]
        if self._planned_text != self.text:  # the server has not been asked yet
            return matched
        seen = {str(item["id"]) for item in matched}
        more = [item for item in self.found if str(item["id"]) not in seen]
        if not more:
            return matched
        return sorted([*matched, *more], key=item_key, reverse=True)

    def render_rows(self, fresh: set[str] | None = None) -> None:
        """Show the loaded items: in place, or rebuilt when the dimension columns change.

        With `fresh` (the ids a refresh brought), the columns are looked for only in
        those rows: a column whose last item left stays until the list is filtered anew.
        """
        table = self.table
        shown = self.shown_items()
        order = dict(SORTS)[self.sort]
        if order is not None:  # stable: the API's newest first among equals
            shown = sorted(shown, key=order)
        keys = [str(item["id"]) for item in shown]
        known = set(self.dimensions)
        if (
            fresh is not None
            and table.columns
            and all(set(self.rows[key].marks) <= known for key in fresh if key in self.rows)
        ):
            dimensions = self.dimensions
        else:
            dimensions = sorted({label for key in keys for label in self.rows[key].marks})
        fitted = fit([self.rows[key] for key in keys], dimensions, room(table, len(keys)))
        wider = all(new >= old for new, old in zip(fitted, self.fitted, strict=True))
        rebuild = dimensions != self.dimensions or not wider or not table.columns
        # A rebuild clears the table: the cursor is put back on its item afterwards.
        with keep_cursor(table) if rebuild else contextlib.nullcontext():
            if rebuild:
                # Columns only ever widen as cells change: narrower ones are new columns.
                table.clear(columns=True)
                forget(table)
                for column in FIXED:
                    table.add_column(column, key=column)
                for name in dimensions:
                    table.add_column(dimension_header(name), key=name)
                table.add_column(ERROR, key=ERROR)
                self.dimensions = dimensions
            if rebuild or fitted != self.fitted:
                # Cut anew to the new widths (when wider, changed cells update in place).
                self.fitted = fitted
                for row in self.rows.values():
                    row.cells = None
            fill(table, [(key, cells(self.rows[key], dimensions, fitted)) for key in keys])
        described = " ".join(f"{key}={value}" for key, value in sorted(self.filters.items()))
        shown_count = str(len(self.items))
        if self.text:  # of the items looked at: those loaded, and those the server found
            looked_at = {str(item["id"]) for item in (*self.items, *self.found)}
            shown_count = f"{len(shown)}/{len(looked_at)}"
        count = counted(shown_count, "item") if shown else "no items"
        # On a narrow terminal the hints go first, then the order; the count, the marks
        # and what filters the list never do (the filters are cut if need be).
        self.status.note(
            f"{count}{' (more below)' if self.more else ''}",
            Part(f"sorted by {self.sort} (loaded rows)" if order is not None else "", drop=1),
            f"{len(self.marked)} marked" if self.marked else "",
            Part("(r, c: act on them; space: unmark)" if self.marked else "", drop=2),
            Part(f"filters: {described}" if described else "", cut=True),
            Part(f"/{self.text}" if self.text else "", cut=True),
        )

    def _row(self, item: dict[str, Any], now: datetime) -> Row:
        return item_row(item, now, marked=str(item["id"]) in self.marked)

    def on_resize(self, event: events.Resize) -> None:
        # Fitted anew once the table has its new size.
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        if self.last_good is not None:
            self.render_rows()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # Near the end of what is loaded: ask for the next page of the API's cursor.
        if self.more and event.cursor_row >= event.data_table.row_count - 5:
            self.want = len(self.items) + PAGE
            self.schedule(0)

    def current(self) -> dict[str, Any] | None:
        """The item under the cursor."""
        key = selected_key(self.table)
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
        self.wq.prompt(":", f"items {current}".rstrip(), self.wq.run_command)

    def action_text_filter(self) -> None:
        """Ask for the `/` text."""

        def apply(text: str | None) -> None:
            if text is not None:
                self.text = text.strip()
                self.render_rows()
                self.schedule(0)  # and ask the server for what is not loaded

        self.wq.prompt("/", self.text, apply)

    def action_sort(self) -> None:
        """The next order of the loaded rows: newest (the API's), longest in its state,
        by phase, by project."""
        names = [name for name, _ in SORTS]
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self.render_rows()

    def action_mark(self) -> None:
        """Mark the item under the cursor for r and c (or unmark it), then go down."""
        item = self.current()
        if item is None:
            return
        key = str(item["id"])
        self.marked.symmetric_difference_update({key})
        self.rows[key] = self._row(item, self.wq.now())
        self.render_rows()
        self.table.action_cursor_down()

    def _marked_items(self, keys: set[str] | None = None) -> list[dict[str, Any]]:
        by_id = {str(item["id"]): item for item in (*self.items, *self.found)}
        return [by_id[key] for key in sorted(self.marked if keys is None else keys) if key in by_id]

    def _acted_on_marks(self) -> None:
        keys, self.marked = self.marked, set()
        now = self.wq.now()
        for item in self._marked_items(keys):
            self.rows[str(item["id"])] = self._row(item, now)
        self.render_rows()
        self.schedule(0)

    def action_retry(self) -> None:
        """Retry the marked items, or the one under the cursor, after confirmation."""
        if self.marked:
            self.wq.confirm_many("retry", self._marked_items(), done=self._acted_on_marks)
            return
        item = self.current()
        if item is not None:
            self.wq.confirm_retry(item, done=lambda: self.schedule(0))

    def action_cancel(self) -> None:
        """Cancel the marked items, or the one under the cursor, after confirmation."""
        if self.marked:
            self.wq.confirm_many("cancel", self._marked_items(), done=self._acted_on_marks)
            return
        item = self.current()
        if item is not None:
            self.wq.confirm_cancel(item, done=lambda: self.schedule(0))

    def action_copy(self) -> None:
        """Copy the id of the item under the cursor."""
        item = self.current()
        if item is not None:
            self.wq.copy_id(item["id"])
