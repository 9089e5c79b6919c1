"""Going from view to view: a view asked for shows its own screen."""

from __future__ import annotations

import asyncio

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.items import ItemsScreen


def test_a_view_asked_for_from_an_items_detail_shows_its_list_not_the_detail() -> None:
    """The detail stayed on top of the Items view: `p` then `i`, or `:items ...` typed
    in the detail, updated a list out of sight, and `r` then retried the detail's item."""
    failed = next(item for item in ITEMS if item["phase"] == "failed")

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.whoami is not None, message="whoami")
            for leave in (["p", "i"], ["i"], ["colon", *"items phase=failed", "enter"]):
                app.switch_mode("items")
                await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
                app.open_item(failed["id"])
                await until(
                    pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail"
                )
                await pilot.press(*leave)
                await until(
                    pilot,
                    lambda: isinstance(app.screen, ItemsScreen),
                    message=f"the list after {leave}: {app.screen}",
                )
                assert not any(isinstance(s, ItemDetailScreen) for s in app.screen_stack)

    asyncio.run(main())
