"""The Items view's `s` (the loaded rows by time in state, phase, project), `/` (the
loaded rows and the server's matches) and its empty state."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.widgets import DataTable

from tests.tui.canned import ITEMS, NOW, CannedServer, canned_api, item
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.items import ItemsScreen
from wq.tui.status import StatusLine
from wq.tui.table import key_at


def order(table: DataTable[Any]) -> list[str]:
    return [str(key_at(table, row)) for row in range(table.row_count)]


def test_s_steps_through_the_orders_and_back_to_newest() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            newest = order(table)
            status = app.screen.query_one(StatusLine)
            expected = {
                "time in state": sorted(ITEMS, key=lambda i: i["updated_at"]),
                "phase": sorted(ITEMS, key=lambda i: i["phase"]),
                "project": sorted(ITEMS, key=lambda i: i["project"]),
            }
            for name, items in expected.items():
                await pilot.press("s")
                want = [item["id"] for item in items]
                await until(pilot, lambda want=want: order(table) == want, message=name)
                assert f"sorted by {name}" in status.extra
            await pilot.press("s")
            await until(pilot, lambda: order(table) == newest, message="newest again")
            assert "sorted" not in status.extra

    asyncio.run(main())


def test_an_empty_list_says_no_items() -> None:
    async def main() -> None:
        app = WqApp(
            canned_api(CannedServer(items=[])), refresh=3600, clock=lambda: NOW, view="items"
        )
        async with app.run_test(size=(80, 24)) as pilot:
            status = app.screen.query_one(StatusLine)
            await until(pilot, lambda: status.extra.startswith("no items"), message="no items")

    asyncio.run(main())


def test_slash_finds_on_the_server_what_is_not_loaded() -> None:
    old = item(1, phase="failed", admission="done", error="certificate expired")
    items = [item(n) for n in range(400, 1, -1)] + [old]
    server = CannedServer(items=items)

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count > 0, message="the first page")
            screen = app.screen
            assert isinstance(screen, ItemsScreen)
            assert old["id"] not in [str(i["id"]) for i in screen.items]  # not loaded
            await pilot.press("slash")
            await until(pilot, lambda: app.screen.query("#prompt-input"), message="the prompt")
            await pilot.press(*"certificate", "enter")
            await until(pilot, lambda: order(table) == [old["id"]], message="the server's match")

    asyncio.run(main())


def test_an_items_command_lists_afresh_without_the_slash_text() -> None:
    # As in k9s: a `:` command that lists items drops the `/` text, so `:items all`
    # shows all items; going back to the view with its key keeps the text.
    team_api = [i["id"] for i in ITEMS if i["project"] == "team/api"]

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            status = app.screen.query_one(StatusLine)
            await pilot.press("slash")
            await until(pilot, lambda: app.screen.query("#prompt-input"), message="the / prompt")
            await pilot.press(*"team/api", "enter")
            await until(pilot, lambda: order(table) == team_api, message="the / text")
            await pilot.press("p", "i")  # another view and back: the text stays
            await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
            assert order(table) == team_api
            await pilot.press("colon")
            await until(pilot, lambda: app.screen.query("#prompt-input"), message="the : line")
            await pilot.press(*"items all", "enter")
            want = [i["id"] for i in ITEMS]
            await until(pilot, lambda: order(table) == want, message="all items", timeout=5)
            assert status.extra.startswith(f"{len(ITEMS)} items")
            assert "/team/api" not in status.extra

    asyncio.run(main())
