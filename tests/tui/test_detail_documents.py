"""The Item detail view with a big details document and a task's output: a bounded
preview (the rest one key away), the output as lines of text, and a layout that gives
the document the whole width on an 80-column terminal."""

from __future__ import annotations

import asyncio

from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import DataTable, Log, Static

from tests.tui.canned import ITEMS, NOW, CannedServer, canned_api, item
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.detail_documents import PREVIEW_LINES
from wq.tui.entry import HistoryEntryScreen

OUTPUT = "step 1 done\nstep 2 done\nall done"
TASK = item(
    1,
    type="task",
    phase="completed",
    admission="done",
    details={
        "kind": "echo",
        "payload": {"rows": [{"n": n, "text": "x" * 40} for n in range(2000)]},
        "log_tail": OUTPUT,
    },
)


def on_screen(widget: Widget) -> str:
    """The text a widget draws, line by line."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


async def opened(app: WqApp, pilot: Pilot[None], item_id: str) -> ItemDetailScreen:
    """The detail of `item_id`, opened and showing its item."""
    app.open_item(item_id)
    await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
    screen = app.screen
    assert isinstance(screen, ItemDetailScreen)
    await until(pilot, lambda: screen.item is not None, message="the item")
    return screen


def test_a_big_document_is_previewed_and_the_output_shown_as_text() -> None:
    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[TASK])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await opened(app, pilot, TASK["id"])
            assert screen.details is not None
            preview = screen.details.preview
            assert len(preview.splitlines()) == PREVIEW_LINES + 1
            assert preview.splitlines()[-1].startswith("… ")
            assert "more lines" in preview and "o opens it in $PAGER" in preview
            assert '"log_tail"' not in screen.details.text  # shown apart, as text
            output = screen.query_one("#output", Static)

            def shown() -> list[str]:
                return [line.strip() for line in on_screen(output).splitlines()]

            # Drawn once laid out: a frame or more later on a loaded machine, where the
            # first line was once seen drawn before the others.
            await until(pilot, lambda: shown()[:3] == OUTPUT.splitlines(), message="output")
            # Under 120 columns the document is below the summary, with the whole width.
            pane = screen.query_one("#details-pane")
            assert pane.size.width >= 76, pane.size

    asyncio.run(main())


RUNNING = item(
    2,
    type="task",
    phase="active",
    admission="admitted",
    details={"kind": "count", "payload": {"to": 9}, "log_tail": "1 of 9"},
)


def test_l_opens_a_tasks_live_output_and_follows_it_until_closed() -> None:
    async def main() -> None:
        server = CannedServer(items=[RUNNING, item(3, type="mr")])
        server.logs[RUNNING["id"]] = "1 of 9\n2 of 9\n\x1b[31mred\x1b[0m 3 of 9\n"
        app = WqApp(canned_api(server), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(100, 40)) as pilot:
            screen = await opened(app, pilot, RUNNING["id"])
            log = screen.query_one("#log", Log)
            assert not log.display
            await pilot.press("l")
            await until(pilot, lambda: log.line_count >= 3, message="the live output")
            assert log.lines[:3] == ["1 of 9", "2 of 9", "\\x1b[31mred\\x1b[0m 3 of 9"]
            # As high as its lines: it was 20 lines high whatever it held, pushing the
            # dimensions and the history off the screen below three lines of output.
            await until(pilot, lambda: log.size.height == 3, message="a 3-line pane")
            assert not screen.query_one("#output", Static).display  # the kept tail gives way
            title = screen.query_one("#output-title", Static)
            assert "live" in str(title.render())
            # What the run writes next shows at the next refresh.
            server.logs[RUNNING["id"]] += "4 of 9\n"
            screen.schedule(0)
            await until(pilot, lambda: "4 of 9" in log.lines, message="the next line")
            await until(pilot, lambda: log.size.height == 4, message="a 4-line pane")
            server.logs[RUNNING["id"]] += "".join(f"{n} of 99\n" for n in range(50))
            screen.schedule(0)
            await until(pilot, lambda: log.line_count > 50, message="many lines")
            assert log.size.height == 20  # at most: the rest scrolls
            await pilot.press("l")
            await pilot.pause()
            assert not log.display and screen.query_one("#output", Static).display
            requests = server.paths.count(f"/api/work-items/{RUNNING['id']}/logs")
            screen.schedule(0)
            await pilot.pause(0.2)
            assert server.paths.count(f"/api/work-items/{RUNNING['id']}/logs") == requests

    asyncio.run(main())


def test_l_on_an_item_without_output_says_so() -> None:
    async def main() -> None:
        mr = item(3, type="mr")
        app = WqApp(canned_api(CannedServer(items=[mr])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(100, 40)) as pilot:
            screen = await opened(app, pilot, mr["id"])
            await pilot.press("l")
            await pilot.pause()
            assert not screen.query_one("#log", Log).display
            assert "mr items have no output of their own" in [
                str(notice.message) for notice in app._notifications
            ]

    asyncio.run(main())


def test_the_summary_counts_a_tasks_attempts_as_the_items_view_does() -> None:
    # A task that ran and completed has attempts 0 (no failure in a row) and one run:
    # the Items view and `wq status` say 1, and so does the detail.
    done = {**TASK, "attempts": 0, "details": {"kind": "echo", "runs": 1}}

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[done])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await opened(app, pilot, done["id"])
            summary = screen.query_one("#summary", Static)
            await pilot.pause()
            (line,) = [line for line in on_screen(summary).splitlines() if "attempts" in line]
            assert line.split() == ["attempts", "1"]

    asyncio.run(main())


def test_a_long_value_wraps_in_its_own_column_not_under_the_labels() -> None:
    project = "some-group/a-rather-long-subgroup/another-subgroup-of-it/the-project-name"
    error = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad'
    failed = item(1, project=project, phase="failed", admission="done", error=error)

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[failed])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await opened(app, pilot, failed["id"])
            await pilot.pause()
            lines = on_screen(screen.query_one("#summary", Static)).splitlines()
            value = len("          id  ")  # where every value starts
            start = next(n for n, line in enumerate(lines) if line.split()[:1] == ["project"])
            rows = lines[start : start + 2]
            assert all(row[:value].strip() in ("project", "") for row in rows), rows
            assert "".join(row[value:].rstrip() for row in rows) == project
            start = next(n for n, line in enumerate(lines) if line.split()[:1] == ["error"])
            rows = lines[start : start + 3]
            assert [row[value:].rstrip() for row in rows] == error.splitlines(), rows

    asyncio.run(main())


LONG_OUTPUT = "\n".join(f"{n} of 90" for n in range(1, 91))
COUNTED = item(
    4,
    type="task",
    phase="cancelled",
    admission="done",
    details={"kind": "count", "payload": {"to": 90}, "log_tail": LONG_OUTPUT},
)


def test_the_output_shows_its_last_lines_not_its_first() -> None:
    """`Output (last lines)` drew the first 20 lines of a longer tail and cut the rest,
    the lines a reader wants (where a run stopped) out of reach."""

    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[COUNTED])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 40)) as pilot:
            screen = await opened(app, pilot, COUNTED["id"])
            output = screen.query_one("#output", Static)

            def shown() -> list[str]:
                return [line.strip(" ▏") for line in on_screen(output).splitlines()]

            await until(pilot, lambda: "90 of 90" in shown(), message=f"the last line: {shown()}")
            lines = [line for line in shown() if line]
            assert lines[0] == "… 70 lines above (o opens the whole)", lines
            assert lines[1:] == [f"{n} of 90" for n in range(71, 91)], lines

    asyncio.run(main())


def test_enter_on_a_history_row_shows_the_entry_whole() -> None:
    """Its row cuts what it changed at 60 characters (at 80 columns `admission:
    "admit`): enter shows each change on a line, and the trigger."""

    async def main() -> None:
        app = WqApp(canned_api(), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await opened(app, pilot, ITEMS[0]["id"])
            history = screen.query_one("#history", DataTable)
            await until(pilot, lambda: history.row_count == 3, message="the history")
            history.focus()
            history.move_cursor(row=2)  # `created`: the longest change
            await pilot.press("enter")
            await until(
                pilot, lambda: isinstance(app.screen, HistoryEntryScreen), message="the entry"
            )
            shown = on_screen(app.screen.query_one("#entry Static", Static))
            lines = [line.strip() for line in shown.splitlines()]
            assert "by ada" in lines
            for change in ('admission: - → "queued"', 'lane: - → "normal"'):
                assert change in lines, lines
            assert 'trigger: {"source":"api"}' in lines
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen, message="back to the detail")

    asyncio.run(main())
