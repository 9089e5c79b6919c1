"""At 80 columns a footer shows whole keys only: none is cut mid-word by the edge or by
the command palette's key on the right."""

from __future__ import annotations

import asyncio
import itertools

from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.dialogs import PromptScreen
from wq.tui.help import HelpScreen


def cut_keys(app: WqApp) -> list[str]:
    """The descriptions of the footer's shown keys and labels that do not show whole."""
    footer = app.screen.query_one(Footer)
    entries = [*footer.query(FooterKey), *footer.query(FooterLabel)]
    palette = [e for e in entries if e.has_class("-command-palette") and e.display]
    right = min([footer.region.right, *(key.region.x for key in palette)])
    return [
        str(getattr(entry, "description", entry.render()))
        for entry in entries
        if entry not in palette and entry.display and entry.region.right > right
    ]


def orphan_labels(app: WqApp) -> list[str]:
    """The labels of groups of keys shown without their keys."""
    footer = app.screen.query_one(Footer)
    children = list(footer.children)
    return [
        str(label.render())
        for before, label in itertools.pairwise(children)
        if isinstance(label, FooterLabel) and label.display and not before.display
    ]


def shown_keys(app: WqApp) -> list[str]:
    """The keys the footer shows (left out ones are not displayed)."""
    footers = app.screen.query(Footer)
    if not footers:
        return []  # the view is not composed yet
    return [key.key for key in footers.first().query(FooterKey) if key.display and key.region.width]


def test_the_item_details_footer_fits_80_columns_and_the_apps_keys_still_work() -> None:
    failed = next(item for item in ITEMS if item["phase"] == "failed")

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.whoami is not None, message="whoami")
            app.open_item(failed["id"])
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
            wanted = {"escape", "r", "o", "l", "question_mark", "q"}
            await until(pilot, lambda: wanted <= set(shown_keys(app)), message=f"{shown_keys(app)}")
            await until(pilot, lambda: not cut_keys(app), message=f"cut: {cut_keys(app)}")
            shown = shown_keys(app)
            assert "c" not in shown  # a failed item cannot be cancelled
            assert "colon" not in shown and "y" not in shown  # left out at 80 columns
            # Shown or left out, the app's keys do what they do elsewhere.
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


def test_every_views_footer_shows_whole_keys_and_always_help_and_quit() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.whoami is not None, message="whoami")
            for mode in ("overview", "pools", "queue", "items"):
                app.switch_mode(mode)
                await until(
                    pilot,
                    lambda: {"question_mark", "q"} <= set(shown_keys(app)),
                    message=f"{mode}: ? and q",
                )
                await until(pilot, lambda: not cut_keys(app), message=f"{mode}: {cut_keys(app)}")
                assert orphan_labels(app) == [], mode
            # The Items view has the most keys: at 80 columns its own come first.
            own = {"f", "slash", "s", "space", "r", "c", "question_mark", "q"}
            await until(pilot, lambda: own <= set(shown_keys(app)), message="the Items keys")
            await until(pilot, lambda: not cut_keys(app), message=f"items: {cut_keys(app)}")
            assert "y" not in shown_keys(app)
            assert orphan_labels(app) == []
            # Wider, the keys left out come back.
            await pilot.resize_terminal(160, 24)
            await until(pilot, lambda: "y" in shown_keys(app), message="copy at 160 columns")
            await until(pilot, lambda: "o" in shown_keys(app), message="the views at 160")
            assert cut_keys(app) == []
            await pilot.resize_terminal(60, 24)
            await until(pilot, lambda: not cut_keys(app), message=f"60: {cut_keys(app)}")
            assert orphan_labels(app) == []
            assert {"question_mark", "q"} <= set(shown_keys(app)), shown_keys(app)
            # Left out of the footer, a key still works.
            await pilot.press("o")
            await until(pilot, lambda: app.current_mode == "overview", message="o at 60")

    asyncio.run(main())


def test_an_items_detail_offers_retry_and_cancel_only_where_they_apply() -> None:
    """The detail of a failed, cancelled or completed item offered `c Cancel` (and an
    active one `r Retry`): pressing it only said the server would refuse."""
    from textual.widgets import Static

    active = next(item for item in ITEMS if item["phase"] == "active")
    failed = next(item for item in ITEMS if item["phase"] == "failed")

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(100, 24)) as pilot:
            await until(pilot, lambda: app.whoami is not None, message="whoami")
            for item, offered, hidden in ((failed, "r", "c"), (active, "c", "r")):
                app.open_item(item["id"])
                await until(
                    pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail"
                )
                await until(
                    pilot,
                    lambda o=offered, h=hidden: o in shown_keys(app) and h not in shown_keys(app),
                    message=f"{item['phase']}: {shown_keys(app)}",
                )
                await pilot.press(hidden)  # says why, asks nothing
                await until(
                    pilot,
                    lambda said=f"(this one is {item['phase']})": any(
                        said in str(toast.message) for toast in app._notifications
                    ),
                    message="the reason",
                )
                assert isinstance(app.screen, ItemDetailScreen)
                assert not app.screen.query(Static).filter(".confirm")
                await pilot.press("escape")

    asyncio.run(main())
