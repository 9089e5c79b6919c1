"""The confirmation dialog on narrow screens: all of it on screen, its buttons whole."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from textual.app import App
from textual.screen import Screen
from textual.widgets import Button

from wq.tui.app import WqApp
from wq.tui.dialogs import ConfirmScreen, PromptScreen
from wq.tui.entry import HistoryEntryScreen
from wq.tui.help import HelpScreen

QUESTION = "Retry 3 items in group/app? Each goes back to the queue."


class Host(App[None]):
    """The dashboard's style sheet, and the dialog alone."""

    CSS_PATH = WqApp.CSS_PATH


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_confirm_dialog_fits_the_screen(width: int) -> None:
    """At 60 columns the dialog (70 wide) ran off both edges of the screen."""

    async def scenario() -> None:
        app = Host()
        async with app.run_test(size=(width, 24)) as pilot:
            answers: list[bool | None] = []
            app.push_screen(ConfirmScreen(QUESTION), answers.append)
            await pilot.pause()
            dialog = app.screen.query_one("#confirm").region
            assert dialog.x >= 0 and dialog.right <= width, dialog
            for button in app.screen.query(Button):
                region = button.region
                assert dialog.x < region.x and region.right < dialog.right, (button.id, region)
                assert str(button.label) in str(button.render())
            await pilot.press("y")
            await pilot.pause()
            assert answers == [True]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConfirmScreen(QUESTION),
        lambda: PromptScreen(":"),
        HelpScreen,
        lambda: HistoryEntryScreen({"id": 1, "event_type": "created", "actor": "ada"}),
    ],
    ids=["confirm", "prompt", "help", "history-entry"],
)
def test_a_dialog_closed_twice_at_once_closes_once(make: Callable[[], Screen[Any]]) -> None:
    """Two of its closing keys in one burst (esc esc, q q) ran `dismiss` twice: the
    second popped the view under it, and the app died (ScreenStackError)."""

    async def scenario() -> None:
        app = Host()
        async with app.run_test(size=(80, 24)) as pilot:
            dialog = make()
            app.push_screen(dialog)
            await pilot.pause()
            await asyncio.gather(dialog.run_action("dismiss"), dialog.run_action("dismiss"))
            await pilot.pause()
            assert app.is_running and len(app.screen_stack) == 1, app.screen_stack

    asyncio.run(scenario())
