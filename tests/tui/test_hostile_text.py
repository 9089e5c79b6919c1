"""Text from the server or the `:` line is shown as it is: a project `team/a[/b]`, an error
holding rich markup or terminal escape sequences, never read as markup (which crashed
the whole TUI) nor written to the terminal as control sequences."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.widget import Widget
from textual.widgets import DataTable, Static

from tests.tui.canned import NOW, CannedServer, canned_api, item
from tests.tui.conftest import table_on_screen, until
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.detail_documents import Details
from wq.tui.status import StatusLine

HOSTILE_ERROR = "\x1b[2J\x1b]52;c;cHduZWQ=\x07 [/oops] [link=https://evil.example]x[/link]"
HOSTILE = item(1, project="team/a[/b]", phase="failed", admission="done", error=HOSTILE_ERROR)


def on_screen(widget: Widget) -> str:
    """The text a widget draws, line by line."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


def test_markup_and_escape_sequences_from_the_server_are_plain_text() -> None:
    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[HOSTILE])), refresh=0.05, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.show_items()
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 1, message="the item")
            await pilot.pause(0.2)  # a few refreshes: the cells are rendered again
            # A loaded machine may draw the row a frame later than the table holds it.
            await until(pilot, lambda: "team/a" in on_screen(table), message="the row drawn")
            shown = on_screen(table)
            assert "team/a[/b]" in shown and "\\x1b[2J" in shown and "\x1b" not in shown
            assert "\\x1b]52;c;" in str(table.get_row(HOSTILE["id"])[-1])  # visible, inert

            app.open_item(HOSTILE["id"])
            await until(pilot, lambda: app.screen.query("#summary"), message="the detail")
            assert isinstance(app.screen, ItemDetailScreen)
            summary = app.screen.query_one("#summary", Static)
            await until(pilot, lambda: "team/a[/b]" in on_screen(summary), message="summary")
            assert "[/oops]" in on_screen(summary) and "\x1b" not in on_screen(summary)

            # A `:` line holding markup is an unknown command, said as typed.
            app.run_command("[/x]")
            await pilot.pause(0.3)  # the notice is drawn
            assert app.is_running and app._exception is None
        assert app.return_code in (None, 0) and app._exception is None

    asyncio.run(main())


def test_a_filter_value_the_server_refuses_is_refused_on_the_spot() -> None:
    server = CannedServer()

    async def main() -> None:
        app = WqApp(canned_api(server), refresh=0.05, clock=lambda: NOW)
        async with app.run_test(size=(120, 36)) as pilot:
            app.run_command("items phase=failed")
            table: DataTable[Any] = await table_on_screen(app, pilot, "#items")
            await until(pilot, lambda: table.row_count == 1, message="the failed item")
            # Was sent as is: a 422 shown as an error and asked again at every refresh.
            app.run_command("items phase=nope")
            app.run_command("items admission=[/x]")
            await pilot.pause(0.3)
            assert app.filters == {"phase": "failed"} and table.row_count == 1
            assert not app.screen.query_one(StatusLine).has_class("error")

    asyncio.run(main())


def test_the_details_pane_and_pager_show_control_characters_escaped() -> None:
    """JSON escapes C0 controls but not C1 ones (CSI is U+009B) nor bidi marks: a task
    payload from a GitLab issue title could write to the operator's terminal."""
    payload = {"c1": "A\x9b31mRED\x9b0m \x85 C\u200fD\u2066E\u202e"}
    details = Details.of({"payload": payload})
    for raw in ("\x9b", "\x85", "\u200f", "\u2066", "\u202e"):
        assert raw not in details.text and raw not in details.preview
    assert "A\\x9b31mRED" in details.text and "C\\u200fD" in details.text
