"""Keys typed in one burst with `:` or `/` (a paste, a fast typist) all reach the prompt.

The view's table has the focus when they arrive: it takes them all, `:` opens the
prompt on its way up to the app's bindings, and the keys behind it reached the app
after the prompt was up, where nothing took them.
"""

from __future__ import annotations

import asyncio

from textual import events
from textual.widgets import Input

from tests.tui.canned import NOW, canned_api
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.dialogs import PromptScreen
from wq.tui.items import ItemsScreen
from wq.tui.queue import QueueScreen

# The names the terminal driver gives these keys (the others are named by themselves).
NAMES = {":": "colon", "/": "slash", " ": "space", "\r": "enter"}


def test_a_command_typed_in_one_burst_runs() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="pools")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(0.2)
            for character in ":queue team/api\r":  # as the driver posts a burst
                app.post_message(events.Key(NAMES.get(character, character), character))
            await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
            assert app.queue_project == "team/api"
            await pilot.pause(0.3)  # the view composed before the app closes

    asyncio.run(main())


def test_a_colon_typed_into_the_command_line_is_text() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="pools")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(0.2)
            await pilot.press("colon")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), message="prompt")
            await pilot.press("a", "colon", "b")
            line = app.screen.query_one("#prompt-input", Input)
            assert line.value == "a:b"
            assert len(app.screen_stack) == 2  # one prompt, not a second one on top

    asyncio.run(main())


def test_a_search_typed_in_one_burst_with_slash_is_the_filter() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="items")
        async with app.run_test(size=(120, 36)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
            await pilot.pause(0.3)
            screen = app.screen
            for character in "/team\r":
                app.post_message(events.Key(NAMES.get(character, character), character))
            await until(pilot, lambda: getattr(screen, "text", None) == "team", message="find")
            await pilot.pause(0.3)

    asyncio.run(main())


def test_enter_pressed_twice_on_the_command_line_runs_the_command_once() -> None:
    """The second enter reached the closing prompt, which closed again: Textual popped
    the view under it and the app died (ScreenStackError)."""

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="pools")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("colon")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), message="prompt")
            await pilot.press(*"items")
            line = app.screen.query_one("#prompt-input", Input)
            for _ in range(2):  # in one burst: both before the prompt has closed
                await line.action_submit()
            await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
            await pilot.pause(0.3)
            assert len(app.screen_stack) == 1, app.screen_stack
            assert app.is_running

    asyncio.run(main())
