"""Items with many pages loaded, against the canned API: a refresh fetches the first
page and the rows on screen only, and what the user looks at stays where it is."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.tui.canned import NOW, CannedServer, canned_api, item
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.items import ItemsScreen


def key_at(table: DataTable[Any], row: int) -> str:
    return str(table.ordered_rows[row].key.value)


def test_a_refresh_deep_in_a_long_list_is_bounded_and_keeps_the_view() -> None:
    items = [item(n) for n in range(2500, 0, -1)]
    server = CannedServer(items=items)

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=0.05, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            await scenario(app, pilot)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        app.show_items()
        table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
        screen = app.screen
        assert isinstance(screen, ItemsScreen)
        await until(pilot, lambda: table.row_count == 100, message="the first page")
        screen.want = 2000  # as paging down to row 2,000 asks for
        screen.schedule(0)
        await until(pilot, lambda: table.row_count == 2000, message="2,000 rows", timeout=60)
        table.move_cursor(row=1500)
        await until(pilot, lambda: table.scroll_y > 1400, message="scrolled to the cursor")
        chosen, top = key_at(table, 1500), key_at(table, int(table.scroll_y))

        # Count what each refresh asks the server for from now on.
        per_poll: list[tuple[int, int]] = []
        real_fetch = screen.fetch

        def counted() -> Any:
            before = len(server.item_limits)
            try:
                return real_fetch()
            finally:
                limits = server.item_limits[before:]
                per_poll.append((len(limits), sum(limits)))

        screen.fetch = counted  # type: ignore[method-assign]
        # A new item arrives at the top; an item on screen fails.
        server.items = [item(2501), *items[:1510], {**items[1510], "phase": "failed"}]
        server.items += items[1511:]
        new = item(2501)["id"]
        await until(pilot, lambda: key_at(table, 0) == new, message="the new item")
        await until(pilot, lambda: len(per_poll) >= 3, message="three refreshes")
        await until(
            pilot, lambda: table.get_row(items[1510]["id"])[3] == "failed", message="the change"
        )
        # Two requests a refresh (the top, the rows on screen), a few hundred rows at most.
        assert all(requests <= 2 and rows <= 300 for requests, rows in per_poll), per_poll
        # The cursor is on its item, the same item heads the screen, the new one is on top.
        assert table.cursor_row == 1501 and key_at(table, 1501) == chosen
        assert key_at(table, int(table.scroll_y)) == top
        assert table.row_count == 2001  # nothing fell off the end for it

    asyncio.run(main())


def test_at_the_top_new_items_come_into_sight_and_the_cursor_keeps_its_item() -> None:
    items = [item(n) for n in range(300, 0, -1)]
    server = CannedServer(items=items)

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=0.05, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 100, message="the first page")
            table.move_cursor(row=3)
            chosen = key_at(table, 3)
            server.items = [item(302), item(301), *items]
            new = item(302)["id"]
            await until(pilot, lambda: key_at(table, 0) == new, message="the new items")
            assert table.scroll_y == 0 and table.row_count == 102
            assert table.cursor_row == 5 and key_at(table, 5) == chosen

    asyncio.run(main())


def test_under_a_text_filter_a_refresh_stays_bounded() -> None:
    # `/` shows rows that lie far apart in the list: the refresh still asks for one
    # page of the API around them, not for every row between the first and the last.
    items = [item(n, error=f"boom {n}" if n % 100 == 0 else None) for n in range(2500, 0, -1)]
    server = CannedServer(items=items)

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=0.05, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            screen = app.screen
            assert isinstance(screen, ItemsScreen)
            screen.want = 2000
            screen.schedule(0)
            await until(pilot, lambda: len(screen.items) == 2000, message="2,000 items")
            screen.text = "boom"
            screen.render_rows()
            assert table.row_count == 20
            per_poll: list[int] = []
            real_fetch = screen.fetch

            def counted() -> Any:
                before = len(server.item_limits)
                try:
                    return real_fetch()
                finally:
                    per_poll.append(sum(server.item_limits[before:]))

            screen.fetch = counted  # type: ignore[method-assign]
            await until(pilot, lambda: len(per_poll) >= 3, message="three refreshes")
            assert max(per_poll) <= 600, per_poll

    asyncio.run(main())


def test_items_that_leave_go_and_the_cursor_keeps_its_item() -> None:
    items = [item(n) for n in range(300, 0, -1)]
    server = CannedServer(items=items)

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=0.05, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 100, message="the first page")
            table.move_cursor(row=10)
            chosen = key_at(table, 10)
            gone = {items[3]["id"], items[5]["id"]}
            server.items = [i for i in items if i["id"] not in gone]
            await until(pilot, lambda: key_at(table, 3) == items[4]["id"], message="rows gone")
            assert not gone & {str(key.value) for key in table.rows}
            assert table.cursor_row == 8 and key_at(table, 8) == chosen

    asyncio.run(main())
