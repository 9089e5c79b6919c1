"""The `:items` command against the canned API: each command sets the filters anew,
and a type the server does not know is said to be one."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.widgets import DataTable

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.items import ItemsScreen
from wq.tui.status import StatusLine


def ids(table: DataTable[Any]) -> set[str]:
    return {str(key.value) for key in table.rows}


def test_an_items_command_replaces_the_filters_before_it() -> None:
    failed = {i["id"] for i in ITEMS if i["phase"] == "failed"}
    team_api = {i["id"] for i in ITEMS if i["project"] == "team/api"}
    assert failed and team_api and not failed & team_api

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.run_command("items project=team/api")
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: ids(table) == team_api, message="team/api's items")
            app.run_command("items phase=failed")  # not "failed ones of team/api": none
            assert app.filters == {"phase": "failed"}
            await until(pilot, lambda: ids(table) == failed, message="the failed items")
            status = app.screen.query_one(StatusLine)
            # One: `1 item` (it said `1 items`).
            await until(pilot, lambda: status.extra.startswith("1 item"), message="1 item")
            assert not status.extra.startswith("1 items"), status.extra
            app.run_command("items")
            assert app.filters == {}
            await until(pilot, lambda: len(ids(table)) == len(ITEMS), message="all items")
            screen = app.screen
            assert isinstance(screen, ItemsScreen)

    asyncio.run(main())


def test_an_unknown_type_is_refused_with_the_known_ones() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.run_command("items type=bogus")
            await until(pilot, lambda: notices(app), message="a notice")
            assert notices(app) == ["type='bogus': this server knows mr, task"]
            assert app.filters == {} and app.current_mode == "overview"
            app.run_command("items type=mr")
            table = await table_on_screen(app, pilot, "#items")
            assert app.filters == {"type": "mr"}
            await until(pilot, lambda: len(ids(table)) == len(ITEMS), message="the mr items")

    asyncio.run(main())


def notices(app: WqApp) -> list[str]:
    """The error notices shown now."""
    return [str(n.message) for n in app._notifications if n.severity == "error"]


def test_f_puts_the_filters_in_use_on_the_line_to_add_to() -> None:
    """`f` filled the line with `items project=team/api` selected: the first key typed
    replaced it (`:phase=failed`, an unknown command) instead of adding to it."""
    both = {i["id"] for i in ITEMS if i["project"] == "team/api" and i["phase"] == "active"}

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.run_command("items project=team/api")
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: app.filters == {"project": "team/api"}, message="filter")
            await pilot.press("f")
            await until(pilot, lambda: app.screen.query("#prompt-input"), message="the line")
            await pilot.pause()
            await pilot.press(*" phase=active", "enter")
            await until(
                pilot,
                lambda: app.filters == {"project": "team/api", "phase": "active"},
                message=f"both filters: {app.filters}",
            )
            await until(pilot, lambda: ids(table) == both, message="the active team/api items")

    asyncio.run(main())
