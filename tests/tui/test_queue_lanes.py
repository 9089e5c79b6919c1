"""The Queue view's lanes against the canned API: short ids, and where the focus starts.

In the canned data `team/api` has work in both lanes and `team/web` only in the normal
lane.
"""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from tests.tui.canned import ITEMS, NOW, CannedServer, canned_api
from tests.tui.conftest import measured, table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.queue import ADMITTED_COLUMNS, LANE_COLUMNS, QueueScreen


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


def test_focus_starts_on_the_first_lane_with_work() -> None:
    assert queued_in("team/web", "alert") == [] and queued_in("team/web", "normal")
    assert queued_in("team/api", "alert")
    server = CannedServer()

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:

            def focused() -> str | None:
                widget = app.focused
                return widget.id if isinstance(widget, DataTable) else None

            def loaded(project: str) -> bool:
                screen = app.screen
                return isinstance(screen, QueueScreen) and screen.data.project == project

            app.show_queue("team/web")  # an empty alert lane: the normal lane has the focus
            await until(pilot, lambda: loaded("team/web"), message="team/web's queue")
            await until(pilot, lambda: focused() == "queue-normal", message="the normal lane")
            app.show_queue("team/api")  # alert work waiting: the alert lane first
            await until(pilot, lambda: loaded("team/api"), message="team/api's queue")
            await until(pilot, lambda: focused() == "queue-alert", message="the alert lane")
            # Tab still goes from lane to lane, and a refresh leaves the focus where it is.
            await pilot.press("tab")
            assert focused() == "queue-normal"
            screen = app.screen
            assert isinstance(screen, QueueScreen)
            polls = server.paths.count("/api/pools/team/api")
            screen.schedule(0)
            await until(
                pilot,
                lambda: server.paths.count("/api/pools/team/api") > polls and not screen.busy,
                message="a refresh",
            )
            await pilot.pause()
            assert focused() == "queue-normal"

    asyncio.run(main())


def test_at_80_columns_every_column_of_the_lanes_and_the_admitted_items_shows_whole() -> None:
    # Side by side, the admitted pane read `holdin` and lost its last column past its edge.
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.show_queue("team/api")
            admitted = await table_on_screen(app, pilot, "#admitted")
            await until(pilot, lambda: admitted.row_count == 2, message="the admitted items")
            tables = {"#admitted": ADMITTED_COLUMNS, "#queue-normal": LANE_COLUMNS}
            for selector, columns in tables.items():
                table = app.screen.query_one(selector, DataTable)
                await measured(pilot, table)
                used = sum(column.get_render_width(table) for column in table.ordered_columns)
                assert used <= table.scrollable_content_region.width, selector
                header = table.render_line(0).text
                assert header.split() == [word for name in columns for word in name.split()]
            # What the queue's entries carry is failures in a row, not the Items view's
            # attempts (which count a task's runs too): the header says so.
            header = app.screen.query_one("#admitted", DataTable).render_line(0).text
            assert header.split()[-1] == "failed"

    asyncio.run(main())
