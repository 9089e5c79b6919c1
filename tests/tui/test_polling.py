"""How the views poll, against the canned API: one poll at a time, none behind a modal,
and a refresh that changes cells keeps the cursor and the scroll where they were."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.app import ScreenStackError
from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.tui import canned
from tests.tui.canned import NOW, CannedServer, canned_api, item
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.help import HelpScreen
from wq.tui.items import ItemsScreen
from wq.tui.pools import PoolsScreen
from wq.tui.queue import QueueScreen
from wq.tui.table import selected_key

Scenario = Callable[[WqApp, Pilot[None]], Awaitable[None]]


def run(server: CannedServer, scenario: Scenario, refresh: float = 0.05) -> None:
    async def main() -> None:
        app = WqApp(canned_api(server), refresh=refresh, clock=lambda: NOW, view="pools")
        async with app.run_test(size=(120, 36)) as pilot:
            await scenario(app, pilot)

    asyncio.run(main())


def test_the_next_poll_waits_for_the_previous_one() -> None:
    server = CannedServer(delay=0.15)  # slower than the refresh interval

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: server.paths.count("/api/pools") >= 5, message="5 polls")
        assert server.most_in_flight["/api/pools"] == 1

    run(server, scenario, refresh=0.01)


def test_no_poll_while_a_modal_is_open() -> None:
    server = CannedServer()

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, PoolsScreen)
        await until(pilot, lambda: screen.last_good is not None, message="the pools")
        ticks: list[int] = []
        real_poll = screen.poll

        def counted() -> None:
            ticks.append(server.paths.count("/api/pools"))
            real_poll()

        screen.poll = counted  # type: ignore[method-assign]
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), message="help")
        await until(pilot, lambda: not screen.busy, message="the last poll before the modal")
        ticks.clear()
        # The timer keeps firing behind the modal, and every time it leaves the server alone.
        await until(pilot, lambda: len(ticks) >= 4, message="four skipped polls")
        assert len(set(ticks)) == 1, ticks
        behind = ticks[0]
        await pilot.press("escape")
        await until(
            pilot, lambda: server.paths.count("/api/pools") > behind, message="polls resume"
        )

    run(server, scenario)


def test_a_poll_due_while_the_app_closes_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    server = CannedServer()

    def no_screens(_: WqApp) -> None:
        raise ScreenStackError("No screens on stack")

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, PoolsScreen)
        await until(pilot, lambda: not screen.busy, message="the pools")
        asked = server.paths.count("/api/pools")
        # While the app closes its screens go before its timers: a poll then finds no
        # screen at all (seen as a traceback from a test that quit the app).
        with monkeypatch.context() as closing:
            closing.setattr(WqApp, "screen", property(no_screens))
            screen.poll()
        assert server.paths.count("/api/pools") == asked and not screen.busy

    run(server, scenario, refresh=60)


def test_a_refresh_updates_cells_and_keeps_cursor_and_scroll() -> None:
    items = [item(n) for n in range(300, 0, -1)]  # newest first, as the API lists them
    server = CannedServer(items=items)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        app.show_items()
        table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
        screen = app.screen
        assert isinstance(screen, ItemsScreen)
        await until(pilot, lambda: table.row_count == 100, message="the first page")
        table.move_cursor(row=60)
        await until(pilot, lambda: table.scroll_y > 0, message="scrolled to the cursor")
        scroll, chosen = table.scroll_y, items[60]["id"]
        # The chosen item fails; nothing arrives or leaves.
        items[60] = {**items[60], "phase": "failed", "error": "GitLab said 500"}
        await until(pilot, lambda: table.get_row(chosen)[3] == "failed", message="the change")
        assert table.cursor_row == 60 and table.scroll_y == scroll
        assert "GitLab said 500" in table.get_row(chosen)[-1]

    run(server, scenario)


def test_queue_without_a_project_shows_the_most_pressed_one() -> None:
    server = CannedServer()

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        app.show_queue()
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
        screen = app.screen
        assert isinstance(screen, QueueScreen)
        await until(pilot, lambda: screen.last_good is not None, message="the queue")
        assert screen.project == "team/api"  # alert work waits there: first in Pools too
        assert "/api/queue/alert" in server.paths and "/api/queue/normal" in server.paths

    run(server, scenario)


def test_items_load_the_next_page_as_the_cursor_nears_the_end() -> None:
    items = [item(n) for n in range(250, 0, -1)]
    server = CannedServer(items=items)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        app.show_items()
        table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
        await until(pilot, lambda: table.row_count == 100, message="the first page")
        assert "(more below)" in str(app.screen.query_one("StatusLine").render())
        table.move_cursor(row=97)
        await until(pilot, lambda: table.row_count == 200, message="the second page")
        assert table.cursor_row == 97
        table.move_cursor(row=198)
        await until(pilot, lambda: table.row_count == 250, message="the last page")
        assert "(more below)" not in str(app.screen.query_one("StatusLine").render())
        keys = [str(key.value) for key in table.rows]
        assert keys == [i["id"] for i in items]  # in the API's order, none twice

    run(server, scenario)


def test_pools_reordered_by_pressure_keep_the_cursor_on_its_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = CannedServer()

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table: DataTable[Any] = await table_on_screen(app, pilot, "#pools")
        await until(pilot, lambda: table.row_count == 3, message="the pools")
        order = [str(key.value) for key in table.rows]
        table.move_cursor(row=order.index("team/web"))
        # team/web becomes the most pressed project: it moves to the top.
        pressed = [canned.pool("team/web", 4, 30, 2, 9000.0), *canned.POOLS[::2]]
        monkeypatch.setattr(canned, "POOLS", pressed)
        await until(
            pilot, lambda: table.ordered_rows[0].key.value == "team/web", message="the new order"
        )
        assert table.cursor_row == 0 and selected_key(table) == "team/web"

    run(server, scenario)
