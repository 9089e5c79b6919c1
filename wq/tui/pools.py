"""The Pools view: one row per project, most pressed first."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header

from wq.tui.format import age, bar, pressure
from wq.tui.polling import PollingScreen
from wq.tui.status import StatusLine
from wq.tui.table import RowTable, fill, selected_key

COLUMNS = ("project", "normal", "alert", "queued normal", "queued alert", "autonomous", "oldest")


class PoolsScreen(PollingScreen):
    """In-flight against capacity per lane, queues and the oldest waiting item."""

    BINDINGS = [  # noqa: RUF012
        Binding("enter", "open", "Items of project"),
        Binding("u", "queue", "Queue of project"),
    ]

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
        table = self.query_one("#pools", DataTable)
        rows = []
        for pool in sorted(data, key=pressure):
            normal, alert = pool["normal"], pool["alert"]
            cells = [
                pool["project"],
                bar(normal["in_flight"], normal["capacity"]),
                bar(alert["in_flight"], alert["capacity"]),
                str(normal["queued"]),
                str(alert["queued"]),
                f"{pool['queued_autonomous']}/{pool['queued_autonomous_cap']}",
                age(pool.get("oldest_queued_age_seconds")),
            ]
            rows.append((str(pool["project"]), cells))
        fill(table, rows)
        self.status.note(f"{len(data)} project{'' if len(data) == 1 else 's'} with work")

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
