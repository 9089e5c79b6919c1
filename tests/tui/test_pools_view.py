"""The Pools view's order (`s`: pressure or name), its backing-off and failed columns,
and how it fits a narrow terminal."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.tui.canned import NOW, POOLS, CannedServer, canned_api
from tests.tui.conftest import measured, until
from wq.tui.app import WqApp
from wq.tui.pools import PoolsScreen
from wq.tui.status import StatusLine
from wq.tui.table import key_at, selected_key


@contextlib.asynccontextmanager
async def pools_shown(
    pools: list[dict[str, Any]],
) -> AsyncIterator[tuple[WqApp, Pilot[None], DataTable[Any]]]:
    """The Pools view of `pools` at 160x36, once it shows them all."""
    app = WqApp(
        canned_api(CannedServer(pools=pools)), refresh=3600, clock=lambda: NOW, view="pools"
    )
    async with app.run_test(size=(160, 36)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message="pools")
        table = app.screen.query_one("#pools", DataTable)
        await until(pilot, lambda: table.row_count == len(pools), message="the pools")
        yield app, pilot, table


def test_s_sorts_by_name_and_back_to_pressure() -> None:
    pools = [{**pool, "backing_off": n, "failed": 2 * n} for n, pool in enumerate(POOLS)]

    async def main() -> None:
        async with pools_shown(pools) as (app, pilot, table):

            def order() -> list[str]:
                return [str(key_at(table, row)) for row in range(table.row_count)]

            by_pressure = order()
            assert by_pressure[0] == "team/api"  # alert work waiting
            await pilot.press("s")
            await until(pilot, lambda: order() == sorted(by_pressure), message="by name")
            status = app.screen.query_one(StatusLine).extra
            assert status.endswith("sorted by name")
            await pilot.press("s")
            await until(pilot, lambda: order() == by_pressure, message="by pressure again")
            row = table.get_row(pools[2]["project"])
            assert row[-2:] == ["2", "4"]  # backing off, failed
            assert table.get_row(pools[0]["project"])[-2:] == ["", ""]  # none: blank

    asyncio.run(main())


LONG = "some-group/a-rather-long-subgroup/the-project-name"


def fits(table: DataTable[Any]) -> bool:
    """Every column within the table's width: nothing is scrolled off to the right."""
    used = sum(column.get_render_width(table) for column in table.ordered_columns)
    return used <= table.scrollable_content_region.width


def test_at_80_columns_the_project_gives_way_and_every_number_shows() -> None:
    pools = [{**pool, "project": f"{LONG}-{n}", "failed": 12} for n, pool in enumerate(POOLS)]

    async def main() -> None:
        async with pools_shown(pools) as (_app, pilot, table):
            await measured(pilot, table)
            assert table.get_row(pools[0]["project"])[0] == pools[0]["project"]  # whole
            table.move_cursor(row=1)
            chosen = selected_key(table)
            await pilot.resize_terminal(80, 24)
            await until(pilot, lambda: "…" in table.get_row(LONG + "-0")[0], message="cut")
            await measured(pilot, table)
            assert fits(table), [c.get_render_width(table) for c in table.ordered_columns]
            assert selected_key(table) == chosen  # the new columns kept the cursor's row
            project = str(table.get_row(LONG + "-0")[0])
            assert project.startswith("some") and project.endswith("name-0"), project
            assert table.get_row(LONG + "-0")[1:] == [
                "4/4",
                "1/1",
                "6",
                "1",
                "3/6",
                "12m",
                "",
                "12",
            ]

    asyncio.run(main())


def test_at_60_columns_the_autonomous_and_alert_queues_give_way() -> None:
    """At 60 columns `backing off` was cut and `failed` was off screen: the header words
    alone need more than 60 cells, so two columns are left out, least needed first."""
    pools = [{**pool, "project": f"{LONG}-{n}", "failed": 12} for n, pool in enumerate(POOLS)]

    async def main() -> None:
        async with pools_shown(pools) as (_app, pilot, table):
            await pilot.resize_terminal(60, 20)
            await until(pilot, lambda: len(table.columns) == 7, message="fewer columns")
            await measured(pilot, table)
            assert fits(table), [c.get_render_width(table) for c in table.ordered_columns]
            headers = [
                str(column.label).replace("\n", " ").strip() for column in table.ordered_columns
            ]
            assert headers == [
                "project",
                "normal",
                "alert",
                "normal queued",
                "oldest",
                "backing off",
                "failed",
            ]
            assert table.get_row(LONG + "-0")[1:] == ["4/4", "1/1", "6", "12m", "", "12"]
            await pilot.resize_terminal(160, 36)  # room again: every column back
            await until(pilot, lambda: len(table.columns) == 9, message="every column")

    asyncio.run(main())
