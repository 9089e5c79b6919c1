"""The Overview: sparklines of the last hour, the queues now, and rows that lead elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from textual import events
from textual.pilot import Pilot
from textual.widgets import DataTable, Sparkline, Static

from tests.tui.canned import NOW, POOLS, CannedServer, canned_api, hour_of_stats, pool, replica
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.items import ItemsScreen
from wq.tui.messages import Loaded
from wq.tui.overview import MAX_FULL_POOLS, OverviewScreen
from wq.tui.queue import QueueScreen

Scenario = Callable[[WqApp, Pilot[None]], Awaitable[None]]


def run(scenario: Scenario, server: CannedServer | None = None) -> None:
    async def main() -> None:
        app = WqApp(canned_api(server or CannedServer()), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, OverviewScreen), message="overview")
            screen = app.screen
            assert isinstance(screen, OverviewScreen)
            await until(pilot, lambda: screen.last_good is not None, message="the first poll")
            await scenario(app, pilot)

    asyncio.run(main())


def attention_rows(app: WqApp) -> dict[str, list[Any]]:
    table = app.screen.query_one("#attention", DataTable)
    return {str(key.value): table.get_row(key) for key in table.rows}


def test_the_overview_is_the_first_view_and_shows_the_hour() -> None:
    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        done = app.screen.query_one("#spark-completed", Sparkline)
        assert len(list(done.data or [])) == 60
        assert max(done.data or []) == 16  # the burst at minute 50
        failed = app.screen.query_one("#spark-failed", Sparkline)
        assert sum(failed.data or []) == 2
        now = str(app.screen.query_one("#now", Static).render())
        assert "alert 1 queued (oldest 1m)" in now and "normal 6 queued" in now
        rows = attention_rows(app)
        assert rows["items:failed"] == ["2 failures in the last hour", "enter: the failed items"]
        assert rows["queue:team/api"][0] == "team/api: pool full, 6 queued"
        assert "lane:normal" in rows

    run(scenario)


def test_enter_leads_to_the_view_that_explains_the_row() -> None:
    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = app.screen.query_one("#attention", DataTable)
        keys = [str(key.value) for key in table.rows]
        table.move_cursor(row=keys.index("items:failed"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
        assert app.filters == {"phase": "failed"}
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, OverviewScreen), message="back")
        table = app.screen.query_one("#attention", DataTable)
        table.move_cursor(row=keys.index("queue:team/api"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
        assert app.queue_project == "team/api"

    run(scenario)


def test_a_quiet_system_says_so() -> None:
    quiet = hour_of_stats(failed_at=())
    quiet["lanes"] = [
        {**lane, "depth": 0, "oldest_queued_at": None, "oldest_wait_seconds": None}
        for lane in quiet["lanes"]
    ]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        rows = attention_rows(app)
        assert "items:failed" not in rows
        assert not any(key.startswith("lane:") for key in rows)
        # The canned pools still hold full ones, most pressed first: all that is left.
        assert next(iter(rows)) == "queue:team/api"
        assert all(key.startswith("queue:") for key in rows)

    run(scenario, CannedServer(stats=quiet))


def test_nothing_to_look_at_is_all_quiet() -> None:
    quiet = hour_of_stats(failed_at=())
    quiet["lanes"] = [{**lane, "depth": 0, "oldest_wait_seconds": None} for lane in quiet["lanes"]]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        assert attention_rows(app) == {
            "pools:quiet": ["all quiet", "nothing failed in the last hour, no queue"]
        }
        now = str(app.screen.query_one("#now", Static).render())
        assert now == "0 running · alert 0 queued · normal 0 queued · 0 projects with work"

    run(scenario, CannedServer(stats=quiet, pools=[]))


def test_lost_replicas_items_backing_off_and_waiting_events_need_attention() -> None:
    stats = hour_of_stats(failed_at=())
    stats["pending_events"] = 4
    pools = [{**POOLS[0], "backing_off": 3}]
    replicas = [replica(1), replica(2, state="lost", being_rescued=2)]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        rows = attention_rows(app)
        assert rows["replicas:wq-2:1"] == [
            "replica wq-2:1 lost",
            "no heartbeat for 1m, 2 items being rescued",
        ]
        assert rows["pools:backing-off"] == [
            "3 items backing off",
            "after failed tries; enter: Pools",
        ]
        assert rows["items:active"] == ["4 events waiting", "stored, not applied yet"]
        listed = app.screen.query_one("#replicas", DataTable)
        assert [listed.get_row(key)[:2] for key in listed.rows] == [
            ["wq-1:1", "alive"],
            ["wq-2:1", "lost"],
        ]
        title = str(app.screen.query_one("#replicas-title", Static).render())
        assert title == "Replicas: 1 alive, 1 lost"
        table = app.screen.query_one("#attention", DataTable)
        table.move_cursor(row=0)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.focused is listed

    run(scenario, CannedServer(stats=stats, pools=pools, replicas=replicas))


class OlderServer(CannedServer):
    """A daemon from before `GET /api/replicas` (met during a rolling upgrade)."""

    def answer(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/replicas":
            return httpx.Response(404, json={"error": "not found"})
        return super().answer(request)


def test_a_server_without_replicas_still_shows_the_overview() -> None:
    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        title = str(app.screen.query_one("#replicas-title", Static).render())
        assert title == "Replicas: not reported by this server"
        assert "items:failed" in attention_rows(app)  # the rest is there

    run(scenario, OlderServer())


class StartingServer(CannedServer):
    """A daemon still starting: every request fails until `ready`."""

    ready = False

    def answer(self, request: httpx.Request) -> httpx.Response:
        if not self.ready:
            return httpx.Response(503, json={"error": "starting"})
        return super().answer(request)


def test_all_quiet_reads_in_full_when_a_frame_comes_before_the_table_measures_it() -> None:
    """A DataTable widens its columns for a new row only when it is next idle; a frame
    drawn before that (in tmux, the screen's refresh timer, or a resize, 1 start in 10)
    was cached with the header widths, and the row read `all` `nothin` until a key was
    pressed. Here a resize is queued right behind the first data, so the screen draws
    before the table measures."""
    quiet = hour_of_stats(failed_at=())
    quiet["lanes"] = [{**lane, "depth": 0, "oldest_wait_seconds": None} for lane in quiet["lanes"]]
    server = StartingServer(stats=quiet, pools=[])

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(130, 38)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, OverviewScreen), message="overview")
            screen = app.screen
            assert isinstance(screen, OverviewScreen)
            await until(pilot, lambda: screen.failures, message="the first poll's failure")
            table = screen.query_one("#attention", DataTable)
            assert table.row_count == 0
            server.ready = True
            screen.post_message(Loaded(screen.fetch()))
            screen.post_message(events.Resize(app.size, app.size))
            await until(pilot, lambda: screen.last_good is not None, message="the data")
            for _ in range(3):
                await pilot.pause()
            assert table.render_line(0).text.split() == ["what", "detail"]
            row = table.render_line(1).text
            assert " all quiet  nothing failed in the last hour, no queue " in row, row

    asyncio.run(main())


def test_every_lost_replica_and_every_kind_of_row_has_a_row_of_its_own() -> None:
    """Two lost replicas, items backing off and more full pools than are listed: each
    is a row (their keys once collided, and the dashboard died with a traceback)."""
    pools = [
        {**pool(f"team/p{n}", 4, 2, 0, 60.0 + n), "backing_off": 1}
        for n in range(MAX_FULL_POOLS + 2)
    ]
    replicas = [replica(1, state="lost"), replica(2, state="lost", being_rescued=1), replica(3)]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        rows = attention_rows(app)
        assert rows["replicas:wq-1:1"][0] == "replica wq-1:1 lost"
        assert rows["replicas:wq-2:1"][0] == "replica wq-2:1 lost"
        assert rows["pools:backing-off"][0] == f"{MAX_FULL_POOLS + 2} items backing off"
        assert rows["pools:more-full"][0] == "2 more full pools"
        table = app.screen.query_one("#attention", DataTable)
        keys = [str(key.value) for key in table.rows]
        table.move_cursor(row=keys.index("replicas:wq-2:1"))
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.focused is app.screen.query_one("#replicas", DataTable)

    run(scenario, CannedServer(pools=pools, replicas=replicas))


def test_needs_attention_shows_its_rows_on_an_80_by_24_terminal() -> None:
    """With long project names the table's scrollbar took the one line left to it: the
    Overview said nothing about what needs attention where it matters most."""
    long = [pool(f"platform-team/{'x' * 40}-{n}", 4, 6, 0, 600.0 + n) for n in range(3)]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        await pilot.pause()
        table = app.screen.query_one("#attention", DataTable)
        assert table.row_count >= 3
        shown = [table.render_line(y).text for y in range(table.size.height)]
        assert sum("pool full" in line for line in shown) >= 2, shown

    run(scenario, CannedServer(pools=long))


def test_the_help_fits_an_80_by_24_terminal() -> None:
    """It was 90 columns wide: lines were cut and its right border off the screen."""

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        await until(pilot, lambda: bool(app.screen.query("#help")), message="the help")
        await pilot.pause()
        help_box = app.screen.query_one("#help")
        assert help_box.region.right <= 80 and help_box.region.bottom <= 24
        assert help_box.region.x >= 0 and help_box.region.y >= 0

    run(scenario)


def what_width(table: DataTable[Any]) -> int:
    return next(iter(table.columns.values())).content_width


def test_needs_attention_narrows_again_when_a_long_row_leaves() -> None:
    """Its columns only widened: once a long project's row had been shown, `detail`
    stayed pushed off an 80-column screen for the rest of the session."""
    server = CannedServer(pools=[pool(f"platform-team/{'x' * 60}", 4, 6, 0, 600.0)])

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        table = screen.query_one("#attention", DataTable)
        await until(pilot, lambda: table.row_count >= 2, message="the long row")
        shown = [table.render_line(y).text for y in range(table.size.height)]
        assert any("…" in line and "6 queued" in line and "oldest waits" in line for line in shown)
        server.pools = [pool("team/api", 4, 6, 0, 600.0)]
        screen.schedule(0)
        await until(
            pilot,
            lambda: what_width(table) < 40,
            message="the column narrowed",
        )
        await pilot.pause()
        shown = [table.render_line(y).text for y in range(table.size.height)]
        assert any("team/api: pool full" in line and "oldest" in line for line in shown), shown

    run(scenario, server)


def test_a_long_project_gives_way_to_the_detail_at_80_and_100_columns() -> None:
    """The detail read `oldest waits 14` at 100 columns (the unit cut off) and was off
    an 80-column screen; Pools and Items cut a long project in the middle instead."""
    name = "busy/very-long-group-name/sub-project-with-a-really-long-name"
    server = CannedServer(pools=[pool(name, 4, 1, 0, 840.0)])

    async def main(width: int) -> None:
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(width, 30)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, OverviewScreen), message="overview")
            table = app.screen.query_one("#attention", DataTable)
            await until(pilot, lambda: table.row_count >= 2, message="the full pool")
            await pilot.pause()
            shown = [table.render_line(y).text for y in range(table.size.height)]
            row = next(line for line in shown if "pool full" in line)
            assert "busy/very" in row and "…" in row and "1 queued" in row, shown
            assert row.rstrip().endswith("oldest waits 14m"), shown

    for width in (80, 100):
        asyncio.run(main(width))
