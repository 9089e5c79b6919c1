"""The Queue view (FIFO per lane, admitted items) and pending events in the item detail.

What no API creates is seeded straight into the daemon's database: `mr` items are always
submitted to the normal lane, and an event stored without a wake-up stays pending.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from sqlalchemy import update
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from tests.cli.daemon import PROJECT, RunningDaemon
from tests.tui.canned import NOW, canned_api, item_id
from tests.tui.conftest import database, table_on_screen, until
from tests.tui.test_items_command import notices
from tests.tui.test_views import project_of, rows, run, table_of
from wq.client.pressure import most_pressed
from wq.engine.models import PendingEvent, WorkItem, utcnow
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.pools import PoolsScreen
from wq.tui.queue import QueueScreen


def column(table: DataTable[Any], index: int) -> list[str]:
    return [str(table.get_row_at(r)[index]) for r in range(table.row_count)]


def title(app: WqApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def to_alert_lane(daemon: RunningDaemon, ids: list[str]) -> None:
    with database(daemon) as session:
        session.execute(
            update(WorkItem)
            .where(WorkItem.id.in_([uuid.UUID(i) for i in ids]))
            .values(lane="alert")
        )


def test_queue_view_shows_each_lane_in_fifo_order(daemon: RunningDaemon) -> None:
    project, other = project_of("queue"), project_of("queue-other")
    normal = [daemon.submit(project=project)["id"] for _ in range(4)]
    alerts = [daemon.submit(project=project)["id"] for _ in range(2)]
    to_alert_lane(daemon, alerts)
    elsewhere = daemon.submit(project=other)["id"]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, PoolsScreen)
        pools = table_of(app, "#pools")
        await until(pilot, lambda: project in rows(pools), message="the pool row")
        pools.move_cursor(row=rows(pools).index(project))
        await pilot.press("u")  # the queue of the project under the cursor
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
        lane = await table_on_screen(app, pilot, "#queue-normal")
        await until(pilot, lambda: rows(lane) == normal, message="the normal lane in order")
        assert column(lane, 0) == ["1", "2", "3", "4"]
        assert rows(table_of(app, "#queue-alert")) == alerts
        assert column(table_of(app, "#queue-alert"), 0) == ["1", "2"]
        assert all(waited.endswith("s") or waited.endswith("m") for waited in column(lane, 4))
        assert "4 queued, 0/0 in flight" in title(app, "#normal-title")
        assert "2 queued" in title(app, "#alert-title")
        # Another project by command; enter opens the item under the cursor.
        app.run_command(f"queue {other}")
        await until(pilot, lambda: rows(lane) == [elsewhere], message="the other queue")
        lane.focus()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
        assert app.screen.item_id == elsewhere
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="back")

    run(daemon, scenario)


def test_queue_alone_shows_the_most_pressed_project(daemon: RunningDaemon) -> None:
    """`:queue nope/x`, then `:queue`: it kept showing the empty `nope/x`."""
    daemon.submit(project=project_of("pressed"))

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        app.run_command("queue nope/x")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
        screen = app.screen
        assert isinstance(screen, QueueScreen)
        await until(pilot, lambda: screen.project == "nope/x", message="the named project")
        app.run_command("queue")
        pressed = most_pressed(app.api.pools())
        assert pressed is not None and pressed != "nope/x"
        await until(pilot, lambda: screen.project == pressed, message="the most pressed")

    run(daemon, scenario)


def test_queue_with_more_than_one_word_is_refused() -> None:
    """`:queue a b c` showed the queue of `a`, saying nothing of the rest."""

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.run_command("queue team/api team/web")
            await until(pilot, lambda: notices(app), message="a notice")
            assert notices(app) == ["one project at most: :queue [PROJECT] (got 2)"]
            assert not isinstance(app.screen, QueueScreen)

    asyncio.run(main())


def test_queue_view_shows_the_admitted_items(daemon: RunningDaemon) -> None:
    # GitLab answers slowly: the item holds its slot while its executor waits.
    daemon.gitlab.add_latency(None, "group%2Fproject", 20.0)
    try:
        item = daemon.submit(project=PROJECT)["id"]

        async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
            app.run_command(f"queue {PROJECT}")
            await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
            admitted = await table_on_screen(app, pilot, "#admitted")
            await until(pilot, lambda: item in rows(admitted), message="the admitted item")
            row = admitted.get_row(item)
            assert row[0] == item[:8] and row[2] == "normal"
            assert "Admitted (" in title(app, "#admitted-title")
            assert item not in rows(table_of(app, "#queue-normal"))

        run(daemon, scenario)
    finally:
        daemon.gitlab.clear_faults()


def test_detail_shows_pending_events_in_application_order(daemon: RunningDaemon) -> None:
    project = project_of("pending")
    item = daemon.submit(project=project)["id"]
    with database(daemon) as session:
        for n, kind in enumerate(("merge_request", "pipeline")):
            session.add(
                PendingEvent(
                    work_item_id=uuid.UUID(item),
                    event_type=kind,
                    payload={"n": n},
                    event_at=utcnow(),
                )
            )
    quiet = daemon.submit(project=project)["id"]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        app.open_item(item)
        await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
        pending = await table_on_screen(app, pilot, "#pending")
        await until(pilot, lambda: pending.row_count == 2, message="the pending events")
        assert column(pending, 1) == ["merge_request", "pipeline"]
        assert '{"n":0}' in column(pending, 3)[0]
        assert "Pending events (2" in title(app, "#pending-title")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message="back")
        app.open_item(quiet)
        await until(
            pilot,
            lambda: isinstance(app.screen, ItemDetailScreen) and app.screen.item_id == quiet,
            message="the other detail",
        )
        screen = app.screen
        await table_on_screen(app, pilot, "#pending")
        await until(pilot, lambda: screen.last_good is not None, message="its data")
        assert "none" in title(app, "#pending-title")
        assert not screen.query_one("#pending", DataTable).display

    run(daemon, scenario)


def test_an_entry_backing_off_says_when_it_is_tried_again() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW, view="queue")
        async with app.run_test(size=(120, 36)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, QueueScreen), message="queue")
            table = app.screen.query_one("#queue-normal", DataTable)
            await until(pilot, lambda: table.row_count > 0, message="the normal lane")
            cells = {str(key.value): table.get_row(key) for key in table.rows}
            assert cells[item_id(9)][-1] == "in 4m (2 failed)"
            assert [row[-1] for key, row in cells.items() if key != item_id(9)] == [""] * (
                len(cells) - 1
            )

    asyncio.run(main())
