"""`fill`: a list that names a row twice shows it once instead of ending the view."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from wq.tui.table import RowTable, fill


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        table: DataTable[str] = RowTable(id="t")
        table.add_column("what", key="what")
        yield table


def test_a_key_given_twice_is_shown_once_first_as_given() -> None:
    async def main() -> None:
        app = OneTable()
        async with app.run_test() as pilot:
            table = app.query_one("#t", DataTable)
            for rows in (
                [("a", ["first"]), ("b", ["other"]), ("a", ["again"])],  # a new table
                [("b", ["other"]), ("a", ["first"]), ("b", ["twice"]), ("c", ["new"])],
            ):
                fill(table, rows)
                await pilot.pause()
                shown = [
                    (str(row.key.value), table.get_row(row.key)[0]) for row in table.ordered_rows
                ]
                first = dict(reversed(rows))  # the first of each key wins
                assert shown == [(key, first[key][0]) for key in dict(rows)]

    asyncio.run(main())
