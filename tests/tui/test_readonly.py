"""`--readonly`, or no retry permission: the footer does not offer retry and cancel, and
the keys say why."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from textual.widgets import Footer

from tests.tui.canned import ITEMS, NOW, WHOAMI, CannedServer, canned_api
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen


def offered(app: WqApp) -> set[str]:
    """The descriptions of the keys the footer shows now."""
    footer = app.screen.query_one(Footer)
    return {str(getattr(key, "description", "")) for key in footer.children}


@pytest.mark.parametrize("readonly", [False, True])
def test_readonly_hides_retry_and_cancel_from_the_footer(readonly: bool) -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, readonly=readonly)
        async with app.run_test(size=(160, 36)) as pilot:
            app.show_items()
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            await until(pilot, lambda: "Copy id" in offered(app), message="the footer")
            assert ({"Retry", "Cancel"} <= offered(app)) is not readonly
            if readonly:
                await pilot.press("r")
                await until(pilot, lambda: app._notifications, message="a notice")
                notices = [str(n.message) for n in app._notifications]
                assert notices == ["retry refused: read-only mode"]

    asyncio.run(main())


class NoRetryServer(CannedServer):
    """The canned server, whose whoami grants reading only."""

    def answer(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/whoami":
            permissions = {"mr": ["read"]}
            authorization = {"effective_permissions": permissions, "matching_rules": []}
            return httpx.Response(200, json={**WHOAMI, "authorization": authorization})
        return super().answer(request)


def test_without_the_retry_permission_retry_and_cancel_are_hidden_too() -> None:
    async def main() -> None:
        app = WqApp(canned_api(NoRetryServer()), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(160, 36)) as pilot:
            app.show_items()
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            await until(pilot, lambda: app.whoami is not None, message="whoami")
            await until(pilot, lambda: "Copy id" in offered(app), message="the footer")
            assert not {"Retry", "Cancel"} & offered(app)
            await pilot.press("r")
            await until(pilot, lambda: app._notifications, message="a notice")
            assert [str(n.message) for n in app._notifications] == [
                "retry refused: no retry permission on mr"
            ]
            app.open_item(ITEMS[0]["id"])
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
            screen = app.screen
            await until(pilot, lambda: screen.item is not None, message="the item")
            await until(pilot, lambda: "Copy id" in offered(app), message="the footer")
            await pilot.pause()
            assert not {"Retry", "Cancel"} & offered(app)

    asyncio.run(main())
