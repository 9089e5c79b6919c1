"""Marking rows (space) in the Items view and acting on them at once (r, c)."""

from __future__ import annotations

import asyncio

from tests.tui.canned import ITEMS, NOW, CannedServer, canned_api
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.dialogs import ConfirmScreen
from wq.tui.items import ItemsScreen
from wq.tui.status import StatusLine


def test_marked_items_are_retried_in_one_request_per_phase_after_one_question() -> None:
    server = CannedServer()
    # The list is newest first: failed 11 is second, cancelled 8 the fifth.
    failed, cancelled = ITEMS[1], ITEMS[4]
    assert (failed["phase"], cancelled["phase"]) == ("failed", "cancelled")

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            screen = app.screen
            assert isinstance(screen, ItemsScreen)
            table.move_cursor(row=1)
            await pilot.press("space")  # marks the failed one, the cursor moves down
            table.move_cursor(row=4)
            await pilot.press("space")
            assert screen.marked == {failed["id"], cancelled["id"]}
            assert str(table.get_row(failed["id"])[0]).startswith("▶")
            assert "2 marked" in screen.query_one(StatusLine).extra
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="asked")
            await pilot.press("y")
            await until(pilot, lambda: len(server.bulk) == 2, message="two requests")
            assert server.bulk == [
                ("retry", {"ids": [failed["id"]], "phase": "failed", "limit": 1, "dry_run": False}),
                (
                    "retry",
                    {"ids": [cancelled["id"]], "phase": "cancelled", "limit": 1, "dry_run": False},
                ),
            ]
            await until(pilot, lambda: not screen.marked, message="the marks cleared")

    asyncio.run(main())


def test_marks_in_readonly_mode_say_why_nothing_happens() -> None:
    server = CannedServer()

    async def main() -> None:
        app = WqApp(
            canned_api(server), refresh=3600, clock=lambda: NOW, view="items", readonly=True
        )
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            await pilot.press("space", "c")
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen)
            assert server.bulk == []

    asyncio.run(main())


def test_space_marks_and_moves_to_the_next_row() -> None:
    # As the help says: space space marks two rows in a row.
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            screen = app.screen
            assert isinstance(screen, ItemsScreen)
            await pilot.press("space", "space")
            assert table.cursor_row == 2
            assert screen.marked == {ITEMS[0]["id"], ITEMS[1]["id"]}

    asyncio.run(main())


def test_one_marked_item_is_asked_about_in_the_singular() -> None:
    """It read `Retry the 1 marked items?`."""
    server = CannedServer()

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == len(ITEMS), message="the items")
            table.move_cursor(row=1)
            await pilot.press("space", "r")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="asked")
            question = app.screen
            assert isinstance(question, ConfirmScreen)
            assert question.question == "Retry the 1 marked item?"

    asyncio.run(main())
