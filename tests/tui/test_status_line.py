"""The status line fits an 80-column terminal: the least important parts go first."""

from __future__ import annotations

import asyncio

from rich.cells import cell_len

from tests.tui.canned import ITEMS, NOW, canned_api
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.items import ItemsScreen
from wq.tui.status import Part, StatusLine, fit

FRESH = [Part("updated 12:00:00")]


def test_fit_drops_the_least_important_then_cuts_what_may_be_cut() -> None:
    remark = [
        Part("12 items"),
        Part("sorted by phase", drop=1),
        Part("(a hint)", drop=2),
        Part("filters: project=a-long-group/a-long-project", cut=True),
    ]
    whole = fit(FRESH, remark, 200)
    assert whole == (
        "updated 12:00:00   12 items  sorted by phase  (a hint)  "
        "filters: project=a-long-group/a-long-project"
    )
    assert fit(FRESH, remark, len(whole) - 1).endswith(
        "sorted by phase  filters: project=a-long-group/a-long-project"
    )
    assert fit(FRESH, remark, 60) == "updated 12:00:00   12 items  filters: project=a-long-group/…"
    assert fit(FRESH, remark, 20) == "updated 12:00:00   …"


def test_an_error_keeps_its_retry_and_the_age_of_the_data() -> None:
    error = [
        Part("error: cannot connect to http://127.0.0.1:8080: connection refused", cut=True),
        Part("(retrying in 4s; showing data from 12:00:00)"),
    ]
    line = fit(error, [Part("queue of team/api", drop=1)], 78)
    assert len(line) <= 78
    assert line.startswith("error: cannot connect to http")
    assert line.endswith("… (retrying in 4s; showing data from 12:00:00)")


def shown(app: WqApp) -> str:
    """The status line as drawn, checked to fit its width."""
    status = app.screen.query_one(StatusLine)
    text = str(status.render())
    assert cell_len(text) <= status.content_size.width, text
    return text


def test_the_items_status_fits_80_columns_with_marks_filters_and_an_order() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.run_command("items type=mr admission=queued project=team/api")
            table = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 5, message="the items")
            screen = app.screen
            assert isinstance(screen, ItemsScreen)
            await pilot.press("s")
            await until(pilot, lambda: "sorted by" in screen.status.extra, message="sorted")
            table.move_cursor(row=0)  # the cursor's item went down with the sort
            await pilot.press("space", "space")
            await until(pilot, lambda: len(screen.marked) == 2, message="two marks")
            line = shown(app)
            assert line.startswith("updated 12:00:00   5 items  2 marked  filters: ")
            # The hint went first, then the order; the whole remark is still there.
            assert "sorted by" in screen.status.extra and "(r, c:" in screen.status.extra

    asyncio.run(main())


def test_the_detail_status_fits_80_columns() -> None:
    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.open_item(ITEMS[1]["id"])
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
            screen = app.screen
            await until(pilot, lambda: screen.query(StatusLine), message="the status line")
            await until(pilot, lambda: screen.query_one(StatusLine).extra, message="the status")
            assert shown(app).endswith(f"item {ITEMS[1]['id'][:8]}: 3 history entries")

    asyncio.run(main())
