"""SVG snapshots of each view at 80x24 and 200x50 (pytest-textual-snapshot), from a canned API.

Everything on screen is fixed: ids, timestamps, and the clock the ages are computed
against. Update after a deliberate change with `pytest tests/tui/test_snapshots.py
--snapshot-update`, and look at the SVGs before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import measuring
from wq.tui.app import WqApp
from wq.tui.polling import PollingScreen

# A standard terminal, and a large one.
SIZES = pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
SnapCompare = Callable[..., bool]


def make_app(view: str = "overview") -> WqApp:
    # A long refresh: the one poll each view makes is the one on screen.
    return WqApp(canned_api(), refresh=3600.0, clock=lambda: NOW, view=view)


async def settle(pilot: Pilot[Any]) -> None:
    """Wait for whoami and the current view's data, then for the redraw."""
    app = pilot.app
    assert isinstance(app, WqApp)
    for _ in range(400):
        screen = app.screen
        if (
            app.whoami is not None
            and isinstance(screen, PollingScreen)
            and screen.last_good is not None
            and not screen.busy
        ):
            break
        await pilot.pause(0.025)
    else:
        raise AssertionError("the view never loaded")
    # Idle passes until every table has measured its new rows (a DataTable sizes its
    # columns on the next idle after rows arrive: a frame before that has the headers'
    # widths, and `RowTable` draws its lines again once measured), then one for the paint.
    for _ in range(200):
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        if not any(measuring(table) for table in app.screen.query(DataTable)):
            break
    await pilot.pause()


def steps(*actions: Callable[[WqApp], object]) -> Callable[[Pilot[Any]], Awaitable[None]]:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, WqApp)
        await settle(pilot)
        for action in actions:
            action(app)
            await pilot.pause(0.05)
            await settle(pilot)

    return run_before


@SIZES
def test_pools_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(make_app("pools"), terminal_size=size, run_before=steps())


@SIZES
def test_overview(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(make_app(), terminal_size=size, run_before=steps())


@SIZES
def test_queue_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    run_before = steps(lambda app: app.show_queue("team/api"))
    assert snap_compare(make_app(), terminal_size=size, run_before=run_before)


@SIZES
def test_items_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(
        make_app(), terminal_size=size, run_before=steps(lambda app: app.show_items())
    )


@SIZES
def test_item_detail_view(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    failed = next(item for item in ITEMS if item["phase"] == "failed")
    run_before = steps(lambda app: app.open_item(failed["id"]))
    assert snap_compare(make_app(), terminal_size=size, run_before=run_before)


pytestmark = pytest.mark.timeout(120)
