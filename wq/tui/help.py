"""The `?` help: every key and command."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from wq.tui.dialogs import Dialog

TITLE = "wq tui — keys"

# Each section: its heading and its entries (the keys, what they do). A description
# wraps in its own column, so that the keys stay apart at any width.
SECTIONS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Views",
        [
            (
                "o   :overview",
                "the first view: throughput and failures of the last hour, the lanes, "
                "what needs attention (enter: show it)",
            ),
            (
                "p   :pools",
                "per-project pools, most pressed first (enter: that project's items, "
                "u: its queue, s: sort by name / by pressure)",
            ),
            (
                "u   :queue [PROJECT]",
                "a project's FIFO per lane and its admitted items; the cursor starts in "
                "the first of them with rows",
            ),
            ("i   :items", "work items, newest first (enter: detail, esc: back)"),
            (
                "    :items k=v ...",
                "filter on the server: type, phase, project, admission (in place of the "
                "filters before; :items alone lists all)",
            ),
            ("f", "edit the server filters on the : line"),
            (
                "/",
                "find items by text: the loaded ones (id, type, project...) and the "
                "server's (project, error, start of the id); it goes when :items, f, the "
                "palette or enter lists anew",
            ),
            ("s", "sort the loaded items: time in state, phase, project, newest"),
        ],
    ),
    (
        "Actions on the item under the cursor (or on the marked items)",
        [
            (
                "space",
                "in Items: mark it (or unmark it) and go to the next row, so that space "
                "space ... marks a run of rows; r and c then act on all the marked ones",
            ),
            ("r", "retry it (asks first; not with --readonly or without the retry permission)"),
            ("c", "cancel it (asks first; same rules as r)"),
            ("y", "copy its id"),
            ("enter", "open its detail (dimensions, pending events, history)"),
            (
                "enter",
                "in the detail, on a History row: the entry whole (each change, its trigger)",
            ),
            ("o", "in the detail: the whole details document in $PAGER"),
            ("l", "in a task's detail: its live output (the run's last lines; l closes it)"),
        ],
    ),
    (
        "Moving",
        [
            ("up/down  j/k", "one row"),
            ("pgup/pgdn", "one page"),
            ("home/end  g/G", "first/last row"),
            (
                "tab  shift+tab",
                "the next/previous table: in Queue, the alert lane, the normal lane and "
                "the admitted items",
            ),
            (
                "ctrl+p",
                "the command palette: type part of a project's name for its items or its queue",
            ),
            ("?", "this help (esc closes)"),
            ("q  :q  ctrl+c", "quit"),
        ],
    ),
]

CLOSING = (
    "Views refresh by themselves. When the server fails, the status line says so and "
    "when the data on screen is from; it retries with back-off."
)


def help_text() -> RenderableType:
    """The help: per section, its keys and their descriptions wrapped to the room."""
    widest = max(len(key) for _, entries in SECTIONS for key, _ in entries)
    parts: list[RenderableType] = [Text(TITLE, style="bold")]
    for heading, entries in SECTIONS:
        keys = Table.grid(padding=(0, 2))
        # The same width in every section, so that the descriptions line up.
        keys.add_column(no_wrap=True, min_width=widest + 2)
        keys.add_column(ratio=1)
        for key, description in entries:
            keys.add_row(Text(f"  {key}"), Text(description))
        parts += [Text(""), Text(heading, style="bold"), keys]
    return Group(*parts, Text(""), Text(CLOSING))


class HelpScreen(Dialog[None]):
    """Keys and commands."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(help_text())
