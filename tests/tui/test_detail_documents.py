"""The Item detail view with a big details document and a task's output: a bounded
preview (the rest one key away), the output as lines of text, and a layout that gives
the document the whole width on an 80-column terminal."""

from __future__ import annotations

import asyncio

from textual.widget import Widget
from textual.widgets import Static

from tests.tui.canned import NOW, CannedServer, canned_api, item
from tests.tui.conftest import until
from wq.tui.app import WqApp
from wq.tui.detail import PREVIEW_LINES, ItemDetailScreen

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


def test_a_big_document_is_previewed_and_the_output_shown_as_text() -> None:
    async def main() -> None:
        app = WqApp(canned_api(CannedServer(items=[TASK])), refresh=3600, clock=lambda: NOW)
        async with app.run_test(size=(80, 24)) as pilot:
            app.open_item(TASK["id"])
            await until(pilot, lambda: isinstance(app.screen, ItemDetailScreen), message="detail")
            screen = app.screen
            assert isinstance(screen, ItemDetailScreen)
            await until(pilot, lambda: screen.details is not None, message="the details")
            assert screen.details is not None
            preview = screen.details.preview
            assert len(preview.splitlines()) == PREVIEW_LINES + 1
            assert preview.splitlines()[-1].startswith("… ")
            assert "more lines" in preview and "o opens it in $PAGER" in preview
            assert '"log_tail"' not in screen.details.text  # shown apart, as text
            output = screen.query_one("#output", Static)
            await pilot.pause()
            shown = [line.strip() for line in on_screen(output).splitlines()]
            assert shown[:3] == OUTPUT.splitlines()
            # Under 120 columns the document is below the summary, with the whole width.
            pane = screen.query_one("#details-pane")
            assert pane.size.width >= 76, pane.size

    asyncio.run(main())
