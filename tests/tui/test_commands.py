"""The command palette jumps to a project's items or queue by a fuzzy part of its name."""

from __future__ import annotations

import asyncio

from textual.command import CommandList, CommandPalette

from tests.tui.canned import NOW, canned_api
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.items import ItemsScreen
from wq.tui.queue import QueueScreen


def best(app: WqApp) -> str | None:
    """The palette's highlighted command, as text."""
    commands = app.screen.query_one(CommandList)
    if commands.highlighted is None or commands.option_count == 0:
        return None
    prompt = commands.get_option_at_index(commands.highlighted).prompt
    return str(getattr(prompt, "plain", prompt)).splitlines()[0]  # the text, not its help


def test_a_fuzzy_project_name_leads_to_its_items_and_its_queue() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("ctrl+p")
            await until(pilot, lambda: isinstance(app.screen, CommandPalette), message="palette")
            await pilot.press(*"itms nfrdns")  # "Items of infra/dns", fuzzily
            await until(pilot, lambda: best(app) == "Items of infra/dns", message="the match")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
            assert app.filters == {"project": "infra/dns"}
            await pilot.press("ctrl+p")
            await until(pilot, lambda: isinstance(app.screen, CommandPalette), message="palette")
            await pilot.press(*"queue team/web")
            await until(pilot, lambda: best(app) == "Queue of team/web", message="the match")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
            assert app.queue_project == "team/web"

    asyncio.run(main())
