"""`--readonly`: the footer does not offer retry and cancel, and the keys say why."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Footer

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp


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
