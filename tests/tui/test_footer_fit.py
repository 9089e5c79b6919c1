"""At 80 columns a footer shows whole keys only: none is cut mid-word by the edge or by
the command palette's key on the right."""

from __future__ import annotations

import asyncio

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.dialogs import PromptScreen
from wq.tui.help import HelpScreen


def cut_keys(app: WqApp) -> list[str]:
    """The descriptions of the footer's keys that do not show whole."""
    footer = app.screen.query_one(Footer)
    keys = list(footer.query(FooterKey))
    palette = [key for key in keys if key.has_class("-command-palette")]
    right = min([footer.region.right, *(key.region.x for key in palette)])
    return [key.description for key in keys if key not in palette and key.region.right > right]


def test_the_item_details_footer_fits_80_columns_and_the_apps_keys_still_work() -> None:
    failed = next(item for item in ITEMS if item["phase"] == "failed")

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.whoami is not None, message="whoami")
            app.open_item(failed["id"])
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
            await until(pilot, lambda: app.screen.query(FooterKey), message="the footer")
            await pilot.pause()
            shown = [key.description for key in app.screen.query(FooterKey)]
            assert {"Back", "Retry", "Cancel", "Copy id"} <= set(shown), shown
            assert cut_keys(app) == []
            # Unlisted here, the app's keys do what they do elsewhere.
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), message="the help")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="back")
            await pilot.press("colon")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), message="the : line")
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="back")
            await pilot.press("p")
            await until(pilot, lambda: app.current_mode == "pools", message="the Pools view")

    asyncio.run(main())
