"""The Pools view: one row per project, most pressed first."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Header

from wq.client.pressure import pressure
from wq.client.shown import counted
from wq.tui.footer import FittingFooter
from wq.tui.format import BAR_WIDTH, age, bar, short_middle
from wq.tui.polling import PollingScreen
from wq.tui.status import Part, StatusLine
from wq.tui.table import RowTable, fill, forget, keep_cursor, selected_key
from wq.tui.widths import PADDING, room, widest

# Two-line headers (the qualifier above), so that no column of small numbers is wider
# than its number for a long name: at 80 columns every number stays on screen.
COLUMNS = (
    "\nproject",
    "\nnormal",
    "\nalert",
    "normal\nqueued",
    "alert\nqueued",
    "auto\nqueued",
    "\noldest",
    "backing\noff",
    "\nfailed",
)
PROJECT = 0
# On a narrow terminal the bars shrink to this width, then go (the numbers stay); only
# then does the project name give way.
NARROWEST_BAR = 4
# The orders `s` steps through: most pressed first (as `wq pools`), or by name.
SORTS = {"pressure": pressure, "name": lambda pool: pool["project"]}


def cells(pool: dict[str, Any], bar_width: int) -> list[str]:
    """A pool's row, its project whole, its lanes' bars `bar_width` wide."""
    normal, alert = pool["normal"], pool["alert"]
    return [
        str(pool["project"]),
        bar(normal["in_flight"], normal["capacity"], bar_width),
        bar(alert["in_flight"], alert["capacity"], bar_width),
        str(normal["queued"]),
        str(alert["queued"]),
        f"{pool['queued_autonomous']}/{pool['queued_autonomous_cap']}",
        age(pool.get("oldest_queued_age_seconds")),
        str(pool.get("backing_off", 0) or ""),
        str(pool.get("failed", 0) or ""),
    ]


# Left out in this order when even the numbers alone do not fit (60 columns): the
# autonomous queue first, then the alert lane's queue (its in-flight count stays).
LEFT_OUT_FIRST = (COLUMNS.index("auto\nqueued"), COLUMNS.index("alert\nqueued"))
EVERY_COLUMN = tuple(range(len(COLUMNS)))


def layout(pools: list[dict[str, Any]], width: int) -> tuple[int, int, tuple[int, ...]]:
    """(project width, bar width, the columns shown) for `pools` in `width` cells: the
    widest bars that leave the projects whole, else no bars and the projects cut to
    what is left, else also fewer columns."""

    def needs(bar_width: int, shown: tuple[int, ...]) -> tuple[int, int]:
        rows = [cells(pool, bar_width) for pool in pools]
        columns = {n: widest((row[n] for row in rows), COLUMNS[n]) for n in shown}
        others = sum(columns.values()) - columns[PROJECT] + PADDING * len(shown)
        return columns[PROJECT], others

    for bar_width in range(BAR_WIDTH, NARROWEST_BAR - 1, -1):
        project, others = needs(bar_width, EVERY_COLUMN)
        if project + others <= width:
            return project, bar_width, EVERY_COLUMN
    least = widest([], COLUMNS[PROJECT])
    shown = EVERY_COLUMN
    project, others = needs(0, shown)
    for column in LEFT_OUT_FIRST:
        if least + others <= width:
            break
        shown = tuple(n for n in shown if n != column)
        project, others = needs(0, shown)
    return max(least, min(project, width - others)), 0, shown


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
        self.fitted: tuple[int, int, tuple[int, ...]] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield RowTable(id="pools", cursor_type="row", zebra_stripes=True, header_height=2)
        yield StatusLine()
        yield FittingFooter()

    def fetch(self) -> list[dict[str, Any]]:
        return self.wq.api.pools()

    def show(self, data: list[dict[str, Any]]) -> None:
        self.data = data
        table = self.query_one("#pools", DataTable)
        fitted = layout(data, room(table, len(data)))
        project_width, bar_width, shown = fitted
        rows = []
        for pool in sorted(data, key=SORTS[self.sort]):
            row = cells(pool, bar_width)
            row[PROJECT] = short_middle(row[PROJECT], project_width)
            rows.append((str(pool["project"]), [row[n] for n in shown]))
        if fitted == self.fitted:
            fill(table, rows)
        else:
            # Columns only ever widen as cells change: narrower ones are new columns,
            # and the cursor is put back on its project after the rebuild.
            self.fitted = fitted
            with keep_cursor(table):
                table.clear(columns=True)
                forget(table)
                for n in shown:
                    table.add_column(COLUMNS[n], key=COLUMNS[n])
                fill(table, rows)
        count = f"{counted(len(data), 'project')} with work"
        self.status.note(count, Part(f"sorted by {self.sort}", drop=1))

    def on_resize(self, event: events.Resize) -> None:
        # Fitted anew once the table has its new size (to the data shown by then).
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        if self.last_good is not None:
            self.show(self.data)

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
