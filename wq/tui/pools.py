"""The Pools view: one row per project, most pressed first."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header

from wq.client.pressure import pressure
from wq.tui.format import age, bar
from wq.tui.polling import PollingScreen
from wq.tui.status import Part, StatusLine
from wq.tui.table import RowTable, fill, selected_key

COLUMNS = (
    "project",
    "normal",
    "alert",
    "queued normal",
    "queued alert",
    "autonomous",
    "oldest",
    "backing off",
    "failed",
)
# The orders `s` steps through: most pressed first (as `wq pools`), or by name.
SORTS = {"pressure": pressure, "name": lambda pool: pool["project"]}


class PoolsScreen(PollingScreen):
    """In-flight against capacity per lane, queues and the oldest waiting item."""

    BINDINGS = [  # noqa: RUF012
        Binding("enter", "open", "Items of project"),
        Binding("u", "queue", "Queue of project"),
        Binding("s", "sort", "Sort"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort = "pressure"
        self.data: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable[str] = RowTable(id="pools", cursor_type="row", zebra_stripes=True)
        for column in COLUMNS:
            table.add_column(column, key=column)
        yield table
        yield StatusLine()
        yield Footer()

    def fetch(self) -> list[dict[str, Any]]:
        return self.wq.api.pools()

    def show(self, data: list[dict[str, Any]]) -> None:
        self.data = data
        table = self.query_one("#pools", DataTable)
        rows = []
        for pool in sorted(data, key=SORTS[self.sort]):
            normal, alert = pool["normal"], pool["alert"]
            cells = [
                pool["project"],
                bar(normal["in_flight"], normal["capacity"]),
                bar(alert["in_flight"], alert["capacity"]),
                str(normal["queued"]),
                str(alert["queued"]),
                f"{pool['queued_autonomous']}/{pool['queued_autonomous_cap']}",
                age(pool.get("oldest_queued_age_seconds")),
                str(pool.get("backing_off", 0) or ""),
                str(pool.get("failed", 0) or ""),
            ]
            rows.append((str(pool["project"]), cells))
        fill(table, rows)
        count = f"{len(data)} project{'' if len(data) == 1 else 's'} with work"
        self.status.note(count, Part(f"sorted by {self.sort}", drop=1))

    def action_sort(self) -> None:
        """The other order: by pressure or by name."""
        self.sort = "name" if self.sort == "pressure" else "pressure"
        self.show(self.data)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # The table's own `enter` binding selects the row: that is what opens it.
        event.stop()
        self.action_open()

    def action_queue(self) -> None:
        """The queue of the project under the cursor."""
        self.wq.show_queue(selected_key(self.query_one("#pools", DataTable)))

    def action_open(self) -> None:
        """The items of the project under the cursor."""
        project = selected_key(self.query_one("#pools", DataTable))
        if project is not None:
            self.wq.show_items(project=project)
