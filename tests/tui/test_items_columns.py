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
