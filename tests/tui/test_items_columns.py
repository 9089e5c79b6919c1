"""The Items view on a standard 80x24 terminal: what matters fits, long projects are cut
in the middle, and the error column shows a traceback's conclusion, not its first line."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.widgets import DataTable

from tests.tui.canned import NOW, CannedServer, canned_api, item
from tests.tui.conftest import measured, table_on_screen, until
from wq.tui.app import WqApp

PROJECT = "some-group/a-rather-long-subgroup/the-project-name"
TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad seconds\n'
FAILED = item(1, project=PROJECT, phase="failed", admission="done", error=TRACEBACK)


def test_an_80_column_terminal_shows_phase_admission_age_and_attempts() -> None:
    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[FAILED])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 1, message="the item")
            await measured(pilot, table)
            line = table.render_line(1).text  # the first row under the header
            project = "some-gr…the-project-name"
            want = [FAILED["id"][:8], "mr", project, "failed", "done", "29m", "1"]
            assert line.split()[: len(want)] == want, line
            assert table.get_row(FAILED["id"])[-1] == "ValueError: bad seconds"

    asyncio.run(main())


def test_a_failed_task_shows_the_runs_it_took() -> None:
    task = {
        **item(2, phase="failed", admission="done", attempts=0),
        "type": "task",
        "details": {"kind": "fail", "runs": 2},
    }

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[task])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 24)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 1, message="the item")
            assert table.get_row(task["id"])[6] == "2"  # attempts: its two runs

    asyncio.run(main())


def test_at_80_columns_every_header_shows_and_the_text_columns_give_way() -> None:
    # Tasks have no dimensions: with a long project and a long error, every column fits
    # an 80-column terminal; the project and the error are cut, nothing else.
    error = "RuntimeError: the agent's run ended without a merge request to show for it"
    tasks = [
        {**item(n, project=PROJECT, phase="failed", admission="done", error=error), "type": "task"}
        | {"dimensions": []}
        for n in range(1, 4)
    ]

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=tasks)), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(tasks), message="the items")
            await measured(pilot, table)
            used = sum(column.get_render_width(table) for column in table.ordered_columns)
            assert used <= table.scrollable_content_region.width
            header = table.render_line(0).text
            headers = ("id", "type", "project", "phase", "admission", "since", "attempts")
            for name in (*headers, "error"):
                assert f" {name} " in f"{header} ", (name, header)
            row = table.get_row(tasks[0]["id"])
            assert "…" in row[2] and row[2].endswith("name")  # the project, cut in the middle
            assert row[6] == "1" and row[-1].startswith("RuntimeErr") and row[-1].endswith("…")

    asyncio.run(main())


def test_at_80_columns_an_error_column_of_dashes_leaves_its_room_to_the_project() -> None:
    # A screenful of tasks with no errors, and a vertical scrollbar: the error column
    # takes no more than its header, and the project has the rest.
    tasks = [
        {**item(n, project=PROJECT, phase="cancelled", admission="done"), "type": "task"}
        | {"dimensions": []}
        for n in range(1, 40)
    ]

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=tasks)), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(tasks), message="the items")
            await measured(pilot, table)
            row = table.get_row(tasks[0]["id"])
            assert row[-1] == "-"
            assert table.ordered_columns[-1].content_width == len("error")
            assert row[2] == "some…ject-name", row[2]  # was `so…t-name`, error `last error`

    asyncio.run(main())


def test_the_dimension_columns_are_measured_by_the_headers_they_show() -> None:
    # `ci_retry`, not `needs_ci_retry`: measured by their labels, the three dimension
    # columns took 18 cells too many from the project and the error at 120 columns.
    error = "RuntimeError: the agent's run ended without a merge request to show for it"
    items = [item(n, project="team/backend-api", error=error) for n in range(1, 4)]

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=items)), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 24)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(items), message="the items")
            await measured(pilot, table)
            used = sum(column.get_render_width(table) for column in table.ordered_columns)
            assert used == table.scrollable_content_region.width  # the whole width, no more
            assert table.get_row(items[0]["id"])[2] == "team/backend-api"

    asyncio.run(main())
