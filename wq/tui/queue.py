"""The Queue view: one project's FIFO per lane, and the items admitted beside it.

Each lane is a table of its own in admission order (position 1 is admitted next), with
how long each item has waited; the lanes page through the API's cursor independently as
the cursor nears the end of what is loaded. The admitted items (at most the pool's
capacity, so one page) show how long they have held their slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Header, Static

from wq.client.pressure import most_pressed
from wq.tui.footer import FittingFooter
from wq.tui.format import age, short_id
from wq.tui.polling import PollingScreen
from wq.tui.status import StatusLine
from wq.tui.table import RowTable, fill, selected_key

PAGE = 100
ADMITTED_PAGE = 500
LANES = ("alert", "normal")
LANE_COLUMNS = ("#", "id", "type", "auto", "waiting", "next try")
# Short ids everywhere, as the other views show them, so both panes fit side by side
# (enter, y and c use the full id). Admitted items are always active (a terminal phase
# frees the slot): no phase column.
# `failed`: the item's failures in a row, which is all the queue's entries carry (the
# Items view's `attempts` also counts a task's runs, from its details).
ADMITTED_COLUMNS = ("id", "type", "lane", "holding", "failed")


def next_try(entry: dict[str, Any], now: datetime) -> str:
    """`in 9m (3 failed)` for an entry backing off: not admitted before then."""
    until = age(entry.get("run_after"), now=now)
    if not until.startswith("in "):
        return ""
    failures = entry.get("attempts") or 0
    return f"{until} ({failures} failed)" if failures else until


@dataclass
class QueueData:
    """One poll of a project's queue: entries per lane, whether more exist, the admitted."""

    project: str | None
    lanes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    more: dict[str, bool] = field(default_factory=dict)
    admitted: list[dict[str, Any]] = field(default_factory=list)
    pool: dict[str, Any] | None = None


class QueueScreen(PollingScreen):
    """A project's queue: alert lane, normal lane, and the admitted items."""

    # Below 120 columns the admitted items go under the lanes, with the whole width:
    # beside them, at 80 columns, both panes cut their columns (`holdin`).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Detail"),
        Binding("c", "cancel", "Cancel"),
        Binding("y", "copy", "Copy id"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.project: str | None = None
        self.want = dict.fromkeys(LANES, PAGE)
        self.data = QueueData(project=None)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="queue-panes"):
            with Vertical(id="lanes"):
                for lane in LANES:
                    yield Static(f"{lane.capitalize()} lane", classes="section", id=f"{lane}-title")
                    table: DataTable[str] = RowTable(
                        id=f"queue-{lane}", cursor_type="row", zebra_stripes=True
                    )
                    for column in LANE_COLUMNS:
                        table.add_column(column, key=column)
                    yield table
            with Vertical(id="admitted-pane"):
                yield Static("Admitted", classes="section", id="admitted-title")
                admitted: DataTable[str] = RowTable(
                    id="admitted", cursor_type="row", zebra_stripes=True
                )
                for column in ADMITTED_COLUMNS:
                    admitted.add_column(column, key=column)
                yield admitted
        yield StatusLine()
        yield FittingFooter()

    def fetch(self) -> QueueData:
        api = self.wq.api
        project = self.wq.queue_project
        if project is None:
            # No project chosen yet: the most pressed one, as `wq queue` takes it.
            project = most_pressed(api.pools())
            if project is None:
                return QueueData(project=None)
        data = QueueData(project=project, pool=api.pool(project))
        same = project == self.project
        for lane in LANES:
            want = self.want[lane] if same else PAGE
            entries: list[dict[str, Any]] = []
            cursor: str | None = None
            while True:
                page = api.queue_page(
                    project, lane, limit=min(1000, want - len(entries)), cursor=cursor
                )
                entries += page["entries"]
                cursor = page.get("next_cursor")
                if not cursor or len(entries) >= want:
                    break
            data.lanes[lane], data.more[lane] = entries, bool(cursor)
        page = api.items_page(limit=ADMITTED_PAGE, project=project, admission="admitted")
        data.admitted = page["items"]
        return data

    def show(self, data: QueueData) -> None:
        another_project = data.project != self.project
        if another_project:
            self.want = dict.fromkeys(LANES, PAGE)
            self.project = data.project
        self.data = data
        now = self.wq.now()
        for lane in LANES:
            table = self.query_one(f"#queue-{lane}", DataTable)
            fill(
                table,
                [
                    (
                        str(entry["id"]),
                        [
                            str(entry["position"]),
                            short_id(entry["id"]),
                            entry["type"],
                            "✓" if entry.get("autonomous") else "",
                            age(entry.get("queued_at"), now=now),
                            next_try(entry, now),
                        ],
                    )
                    for entry in data.lanes.get(lane, [])
                ],
            )
            self._title(lane, data)
        admitted = self.query_one("#admitted", DataTable)
        fill(
            admitted,
            [
                (
                    str(item["id"]),
                    [
                        short_id(item["id"]),
                        item["type"],
                        item["lane"],
                        age(item.get("admitted_at"), now=now),
                        str(item["attempts"]),
                    ],
                )
                for item in data.admitted
            ],
        )
        self.query_one("#admitted-title", Static).update(f"Admitted ({len(data.admitted)})")
        if another_project:
            # Only for a project just shown: on later refreshes the focus stays where
            # the user put it (tab moves it between the tables).
            self._focus_first_with_rows()
        self.status.note(
            f"queue of {data.project}" if data.project else "no project has queued work"
        )

    def _focus_first_with_rows(self) -> None:
        """Focus the first table with rows: the alert lane, the normal lane, the admitted
        items; the normal lane when all are empty (focus on an empty alert lane, the
        usual case, left the cursor where enter and c did nothing)."""
        tables = [self.query_one(f"#queue-{lane}", DataTable) for lane in LANES]
        tables.append(self.query_one("#admitted", DataTable))
        with_rows = [table for table in tables if table.row_count]
        (with_rows[0] if with_rows else tables[LANES.index("normal")]).focus()

    def _title(self, lane: str, data: QueueData) -> None:
        """`Normal lane: 12 queued, 3/10 in flight` from the pool document."""
        pool = (data.pool or {}).get(lane) or {}
        title = f"{lane.capitalize()} lane"
        if pool:
            title += f": {pool['queued']} queued, {pool['in_flight']}/{pool['capacity']} in flight"
        if data.more.get(lane):
            title += f" (first {len(data.lanes[lane])} loaded)"
        self.query_one(f"#{lane}-title", Static).update(title)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # Near the end of a lane's loaded entries: ask for that lane's next page.
        lane = (event.data_table.id or "").removeprefix("queue-")
        near_end = event.cursor_row >= event.data_table.row_count - 5
        if lane in LANES and self.data.more.get(lane) and near_end:
            self.want[lane] = len(self.data.lanes[lane]) + PAGE
            self.data.more[lane] = False
            self.schedule(0)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # The table's own `enter` binding selects the row: that is what opens it.
        event.stop()
        self.action_open()

    def current(self) -> dict[str, Any] | None:
        """The entry or admitted item under the cursor of the focused table."""
        table = self.focused if isinstance(self.focused, DataTable) else None
        if table is None:
            return None
        key = selected_key(table)
        rows = [*self.data.admitted, *(e for lane in LANES for e in self.data.lanes.get(lane, []))]
        return next((row for row in rows if row["id"] == key), None)

    def action_open(self) -> None:
        """The detail of the item under the cursor."""
        item = self.current()
        if item is not None:
            self.wq.open_item(item["id"])

    def action_cancel(self) -> None:
        """Cancel the item under the cursor, after confirmation."""
        item = self.current()
        if item is not None:
            full = {"phase": "active", **item}
            self.wq.confirm_cancel(full, done=lambda: self.schedule(0))

    def action_copy(self) -> None:
        """Copy the id of the item under the cursor."""
        item = self.current()
        if item is not None:
            self.wq.copy_id(item["id"])
