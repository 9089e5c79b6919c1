"""The Pools view's order (`s`: pressure or name) and its backing-off and failed columns."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from tests.tui.canned import NOW, POOLS, CannedServer, canned_api
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.pools import PoolsScreen
from wq.tui.status import StatusLine
from wq.tui.table import key_at


def test_s_sorts_by_name_and_back_to_pressure() -> None:
    pools = [{**pool, "backing_off": n, "failed": 2 * n} for n, pool in enumerate(POOLS)]

    async def main() -> None:
        app = WqApp(
            canned_api(CannedServer(pools=pools)), refresh=3600, clock=lambda: NOW, view="pools"
        )
        async with app.run_test(size=(160, 36)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message="pools")
            table = app.screen.query_one("#pools", DataTable)
            await until(pilot, lambda: table.row_count == len(pools), message="the pools")

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
