"""`wq tui` through `App.run_test()` against a real daemon on loopback.

Items are MR items in projects under `group/blocked` (a pool of capacity 0), so they stay
queued where the tests put them; a cancelled item is the retry candidate.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from tests.cli.daemon import BLOCKED, RunningDaemon
from tests.tui.conftest import api_for, until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.dialogs import ConfirmScreen
from wq.tui.items import ItemsScreen
from wq.tui.pools import PoolsScreen
from wq.tui.status import StatusLine

SIZE = (120, 36)
REFRESH = 0.3

Scenario = Callable[[WqApp, Pilot[None]], Awaitable[None]]


def run(daemon: RunningDaemon, scenario: Scenario, **options: Any) -> None:
    """Run the app on a 120x36 screen for one scenario."""
    token = options.pop("token", None)
    options.setdefault("view", "pools")  # the scenarios start where their keys lead from

    async def main() -> None:
        with api_for(daemon, token) as api:
            app = WqApp(api, refresh=REFRESH, **options)
            async with app.run_test(size=SIZE) as pilot:
                await scenario(app, pilot)

    asyncio.run(main())


def project_of(name: str) -> str:
    return f"{BLOCKED}/{name}-{uuid.uuid4().hex[:6]}"


def rows(table: DataTable[Any]) -> list[str]:
    """Row keys in display order."""
    return [str(table.coordinate_to_cell_key((r, 0)).row_key.value) for r in range(table.row_count)]


def table_of(app: WqApp, selector: str) -> DataTable[Any]:
    return app.screen.query_one(selector, DataTable)


def status_of(app: WqApp) -> str:
    return str(app.screen.query_one(StatusLine).message)


def toasts(app: WqApp) -> list[str]:
    """The notices shown now (Textual keeps them on the app until they time out)."""
    return [notice.message for notice in app._notifications]


def phase(daemon: RunningDaemon, item_id: str) -> str:
    with daemon.api() as http:
        return str(http.get(f"/api/work-items/{item_id}").json()["phase"])


def cancel(daemon: RunningDaemon, item_id: str) -> None:
    with daemon.api() as http:
        response = http.post(f"/api/work-items/{item_id}/cancel")
    assert response.status_code == 200, response.text


async def open_items(app: WqApp, pilot: Pilot[None], command: str) -> DataTable[Any]:
    """Run a `:` command that shows items (typing it is tested once, for `:pools`)."""
    app.run_command(command)
    await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="the items view")
    screen = app.screen
    assert isinstance(screen, ItemsScreen)
    await until(
        pilot,
        lambda: screen.filters == app.filters and screen.last_good is not None,
        message="items with the new filters",
    )
    return table_of(app, "#items")


def test_pools_view_shows_usage_and_identity(daemon: RunningDaemon) -> None:
    busy, calm = project_of("busy"), project_of("calm")
    for _ in range(3):
        daemon.submit(project=busy)
    daemon.submit(project=calm)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, PoolsScreen)
        table = table_of(app, "#pools")
        await until(pilot, lambda: {busy, calm} <= set(rows(table)), message="both pools")
        keys = rows(table)
        assert keys.index(busy) < keys.index(calm)  # more queued: more pressure
        row = table.get_row(busy)
        assert row[1].endswith("0/0")  # normal lane: in-flight/capacity
        assert row[3] == "3"  # queued in the normal lane
        await until(pilot, lambda: "ada @ " in app.sub_title, message="whoami in the header")
        assert daemon.url in app.sub_title
        assert status_of(app).startswith("updated")

    run(daemon, scenario)


def test_keys_and_commands_switch_views(daemon: RunningDaemon) -> None:
    project = project_of("switch")
    created = daemon.submit(project=project)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message="pools")
        # enter on a pool: that project's items.
        table = table_of(app, "#pools")
        await until(pilot, lambda: project in rows(table), message="the pool row")
        table.move_cursor(row=rows(table).index(project))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="items")
        items = table_of(app, "#items")
        await until(pilot, lambda: rows(items) == [created["id"]], message="the project's item")
        await pilot.press("question_mark")
        await until(pilot, lambda: type(app.screen).__name__ == "HelpScreen", message="help")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="help closed")
        await pilot.press("colon", *"pools", "enter")
        await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message=":pools")

    run(daemon, scenario)


def test_items_filters_on_the_server_and_by_text(daemon: RunningDaemon) -> None:
    project, other = project_of("filter"), project_of("other")
    mine = [daemon.submit(project=project)["id"] for _ in range(3)]
    daemon.submit(project=other)
    cancel(daemon, mine[0])

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: sorted(rows(table)) == sorted(mine), message="three items")
        assert rows(table) == mine[::-1]  # newest first
        table = await open_items(app, pilot, "items phase=cancelled")
        await until(pilot, lambda: mine[0] in rows(table), message="the cancelled item")
        assert mine[1] not in rows(table)
        # f puts the filters on the : line to edit them.
        await pilot.press("f")
        await until(pilot, lambda: app.screen.query("#prompt-input"), message="the : line")
        line = app.screen.query_one("#prompt-input", Input)
        assert line.value == "items phase=cancelled"  # the command's filters, not added up
        line.value = f"items project={project} phase=active"
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (
                app.filters == {"project": project, "phase": "active"}
                and sorted(rows(table)) == sorted(mine[1:])
            ),
            message="the edited filters",
        )
        # Free text on what is loaded.
        table = await open_items(app, pilot, f"items all project={project}")
        await until(pilot, lambda: len(rows(table)) == 3, message="all three again")
        await pilot.press("slash")
        await until(pilot, lambda: app.screen.query("#prompt-input"), message="the / prompt")
        await pilot.press(*mine[2][:8], "enter")
        await until(pilot, lambda: rows(table) == [mine[2]], message="the text filter")
        assert "1/3 items" in str(app.screen.query_one(StatusLine).render())

    run(daemon, scenario)


def test_item_detail_shows_dimensions_and_history(daemon: RunningDaemon) -> None:
    project = project_of("detail")
    item = daemon.submit(project=project)
    cancel(daemon, item["id"])

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: rows(table) == [item["id"]], message="the item")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
        history = table_of(app, "#history")
        await until(pilot, lambda: history.row_count >= 2, message="the history")
        events = [history.get_row_at(r)[2] for r in range(history.row_count)]
        assert {"created", "queued", "phase_changed"} <= set(events), events
        with daemon.api() as http:
            expected = http.get(f"/api/work-items/{item['id']}/history").json()["entries"]
        assert [str(e["id"]) for e in expected] == rows(history)
        summary = app.screen.query_one("#summary")
        assert item["id"] in "".join(
            summary.render_line(y).text for y in range(summary.size.height)
        )
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="back")

    run(daemon, scenario)


def test_retry_asks_first_then_retries(daemon: RunningDaemon) -> None:
    project = project_of("retry")
    item = daemon.submit(project=project)
    cancel(daemon, item["id"])

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: rows(table) == [item["id"]], message="the item")
        await until(pilot, lambda: app.may_retry("mr"), message="whoami")
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the dialog")
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, ItemsScreen), message="declined")
        assert phase(daemon, item["id"]) == "cancelled"
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the dialog")
        await pilot.press("y")
        await until(pilot, lambda: phase(daemon, item["id"]) == "active", message="the retry")
        await until(
            pilot, lambda: table.get_row(item["id"])[3] == "active", message="the new phase"
        )

    run(daemon, scenario)


def test_retry_is_refused_read_only_and_without_permission(daemon: RunningDaemon) -> None:
    project = project_of("refused")
    item = daemon.submit(project=project)
    cancel(daemon, item["id"])

    async def attempt(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: rows(table) == [item["id"]], message="the item")
        await until(pilot, lambda: app.whoami is not None, message="whoami")
        assert not app.may_retry("mr")
        reason = "read-only mode" if app.readonly else "no retry permission on mr"
        await pilot.press("r")
        await until(pilot, lambda: f"retry refused: {reason}" in toasts(app), message="why")
        await pilot.press("y")  # were a dialog open, this would confirm it
        await pilot.press("c")
        await until(pilot, lambda: f"cancel refused: {reason}" in toasts(app), message="why")
        await pilot.press("y")
        await app.workers.wait_for_complete()
        assert isinstance(app.screen, ItemsScreen)
        assert phase(daemon, item["id"]) == "cancelled"

    run(daemon, attempt, readonly=True)
    run(daemon, attempt, token=daemon.reader)


def test_an_action_the_items_phase_does_not_take_is_said_at_once(daemon: RunningDaemon) -> None:
    # An active item cannot be retried, a cancelled one cannot be cancelled: said at
    # once, without a question whose yes the server would refuse.
    project = project_of("phases")
    item = daemon.submit(project=project)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: rows(table) == [item["id"]], message="the item")
        await until(pilot, lambda: app.may_retry("mr"), message="whoami")
        await pilot.press("r")
        said = "retry: only failed or cancelled items can be retried (this one is active)"
        await until(pilot, lambda: said in toasts(app), message="why not")
        assert isinstance(app.screen, ItemsScreen)
        cancel(daemon, item["id"])
        await until(pilot, lambda: table.get_row(item["id"])[3] == "cancelled", message="cancelled")
        await pilot.press("c")
        said = "cancel: only active items can be cancelled (this one is cancelled)"
        await until(pilot, lambda: said in toasts(app), message="why not")
        assert isinstance(app.screen, ItemsScreen)

    run(daemon, scenario)


def test_cursor_stays_on_its_item_across_refreshes(daemon: RunningDaemon) -> None:
    project = project_of("cursor")
    created = [daemon.submit(project=project)["id"] for _ in range(4)]

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: len(rows(table)) == 4, message="four items")
        table.move_cursor(row=2)
        chosen = rows(table)[2]
        newer = daemon.submit(project=project)["id"]  # shifts every row down by one
        await until(pilot, lambda: rows(table)[:1] == [newer], message="the new item on top")
        assert rows(table)[table.cursor_row] == chosen
        assert table.cursor_row == 3
        assert set(created) < set(rows(table))

    run(daemon, scenario)


def test_vi_keys_move_the_cursor_and_ctrl_c_quits(daemon: RunningDaemon) -> None:
    project = project_of("keys")
    for _ in range(4):
        daemon.submit(project=project)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: len(rows(table)) == 4, message="four items")
        moves = {"j": 1, "k": 0, "G": 3, "g": 0, "end": 3, "home": 0}
        for key, row in moves.items():
            await pilot.press(key)
            assert table.cursor_row == row, key
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app.return_code is not None, message="the exit")

    run(daemon, scenario)


def test_cancel_asks_first_then_cancels(daemon: RunningDaemon) -> None:
    project = project_of("cancel")
    item = daemon.submit(project=project)

    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        table = await open_items(app, pilot, f"items project={project}")
        await until(pilot, lambda: rows(table) == [item["id"]], message="the item")
        await until(pilot, lambda: app.may_retry("mr"), message="whoami")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), message="the dialog")
        await pilot.press("y")
        await until(pilot, lambda: phase(daemon, item["id"]) == "cancelled", message="cancel")

    run(daemon, scenario)


def test_keys_typed_right_after_quit_end_nothing_but_the_app(daemon: RunningDaemon) -> None:
    # Keys a person types (or pastes) right behind `q` reach the app while it closes:
    # a view they open must not poll a screen that is being taken down.
    for modes in (("items",), ("queue", "items"), ("items", "pools", "overview")):

        async def scenario(app: WqApp, pilot: Pilot[None], modes: tuple[str, ...] = modes) -> None:
            await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message="pools")
            app.exit()
            for mode in modes:  # as the keys' bindings do, before the exit is handled
                app.switch_mode(mode)
            await pilot.pause(0.5)

        run(daemon, scenario)


def test_keys_pressed_right_after_q_run_no_action(daemon: RunningDaemon) -> None:
    # `q i p u` typed at once: `u` reached a Pools view made for the closing app, whose
    # table was gone (a traceback, exit 1). Once the app exits, no key acts.
    async def scenario(app: WqApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: isinstance(app.screen, PoolsScreen), message="pools")
        screen = app.screen
        app.exit()
        # The actions of `i`, then of the Pools view's `u` and `enter`, as those keys
        # would run them.
        assert not await app.run_action("view('items')")
        assert not await app.run_action("queue", screen)
        assert not await app.run_action("open", screen)
        assert app.current_mode == "pools"

    run(daemon, scenario)
