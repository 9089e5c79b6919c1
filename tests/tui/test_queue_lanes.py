"""The Queue view's lanes against the canned API."""

from __future__ import annotations

import asyncio

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp


def queued_in(project: str, lane: str) -> list[str]:
    return [
        i["id"]
        for i in ITEMS
        if i["project"] == project and i["lane"] == lane and i["admission"] == "queued"
    ]


def test_lanes_show_short_ids_as_the_other_views_do() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.show_queue("team/api")
            lane = await table_on_screen(app, pilot, "#queue-normal")
            wanted = queued_in("team/api", "normal")
            await until(pilot, lambda: lane.row_count == len(wanted), message="the lane")
            shown = {str(lane.get_row(key)[1]) for key in wanted}
            assert shown == {key[:8] for key in wanted}

    asyncio.run(main())
