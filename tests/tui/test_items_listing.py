"""The Items view's listing: what a `/` search counts, and where a new listing starts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from textual.pilot import Pilot

from tests.tui.canned import NOW, CannedServer, canned_api, item
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.items import ItemsScreen
from wq.tui.status import StatusLine


def on_items(
    server: CannedServer, scenario: Callable[[ItemsScreen, Pilot[None]], Awaitable[None]]
) -> None:
    """Run `scenario` on the Items view of `server`'s items, at 160x40."""

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
            assert isinstance(app.screen, ItemsScreen)
            await scenario(app.screen, pilot)

    asyncio.run(main())


def test_a_search_counts_the_loaded_and_the_found_items() -> None:
    """Every loaded item matched `queued` (its admission) and the server found 50 older
    ones (their error): the line said `150/100 items`."""
    older = [item(n, error="queued behind a lock") for n in range(1, 51)]
    newer = [item(n) for n in range(51, 301)]

    async def scenario(screen: ItemsScreen, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(screen.items) == 100, message="the first page")
        await pilot.press("slash", *"queued", "enter")
        status = screen.query_one(StatusLine)
        await until(pilot, lambda: "150/150 items" in str(status.render()), message="the count")

    on_items(CannedServer(items=[*older, *newer]), scenario)


def test_a_new_listing_starts_at_its_first_row() -> None:
    """`:items project=...` after scrolling kept the cursor on the old list's row 20."""

    async def scenario(screen: ItemsScreen, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: screen.table.row_count == 90, message="the items")
        await pilot.press(*("j" * 20))
        assert screen.table.cursor_row == 20
        await pilot.press("colon", *"items project=team/web", "enter")
        await until(pilot, lambda: screen.table.row_count == 30, message="team/web's")
        assert screen.table.cursor_row == 0

    on_items(CannedServer(items=[item(n) for n in range(1, 91)]), scenario)
