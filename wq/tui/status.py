"""The status line under every view: when the data is from, or what went wrong.

It holds one line made of parts; when the terminal is too narrow for all of them, the
least important parts are left out first, then a part that may be cut (an error's
text, the filters) is shortened, and only then is the line's end cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.cells import cell_len
from rich.text import Text
from textual.widget import Widget

from wq.cli.common import printable

SEPARATOR = "  "
# Between the freshness (or the error) and the view's remark.
GAP = "   "
# A part that may be cut keeps at least this many cells (with its `…`).
SHORTEST_CUT = 12


@dataclass(frozen=True)
class Part:
    """A piece of the status line.

    `drop`: 0 is always shown; on a narrow terminal the parts of the highest `drop` go
    first. `cut`: the part may be shortened (with `…`) to make room for the others.
    """

    text: str
    drop: int = 0
    cut: bool = False


def fit(head: Sequence[Part], remark: Sequence[Part], width: int) -> str:
    """`head` (the freshness or the error, its parts joined by a space), then `remark`
    (a view's parts), within `width` cells: the parts of highest `drop` left out first,
    then the first part that may be cut shortened, then the line's end cut."""
    head, remark = list(head), [part for part in remark if part.text]
    while cell_len(_join(head, remark)) > width and any(part.drop for part in remark):
        least = max(part.drop for part in remark)
        # Of equal importance, the rightmost goes first.
        del remark[max(n for n, part in enumerate(remark) if part.drop == least)]
    over = cell_len(_join(head, remark)) - width
    for parts in (head, remark):
        cuttable = next((n for n, part in enumerate(parts) if part.cut), None)
        if over > 0 and cuttable is not None:
            text = parts[cuttable].text
            room = max(SHORTEST_CUT, cell_len(text) - over)
            if room < cell_len(text):
                parts[cuttable] = Part(_cut(text, room))
                over -= cell_len(text) - room
    line = _join(head, remark)
    return line if cell_len(line) <= width else _cut(line, width)


def _join(head: Sequence[Part], remark: Sequence[Part]) -> str:
    line = " ".join(part.text for part in head)
    return f"{line}{GAP}{SEPARATOR.join(part.text for part in remark)}" if remark else line


def _cut(text: str, width: int) -> str:
    """At most `width` cells, ending in `…` when cut."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    cut = Text(text)
    cut.truncate(width - 1)
    return f"{cut.plain}…"


class StatusLine(Widget):
    """One line: `updated 12:00:03`, or the last error with the retry delay, then the
    view's remark (counts, filters), fitted to the terminal's width."""

    DEFAULT_CSS = """
    StatusLine { height: 1; padding: 0 1; background: $panel; }
    StatusLine.error { background: $error 40%; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.message = "connecting…"  # the freshness or the error, whole
        self._head: list[Part] = [Part(self.message)]
        self._remark: list[Part] = []

    @property
    def extra(self) -> str:
        """The view's remark, whole (what a wide enough terminal shows)."""
        return SEPARATOR.join(part.text for part in self._remark if part.text)

    def ok(self, at: datetime) -> None:
        """The data on screen is fresh."""
        self.remove_class("error")
        self._set(f"updated {at:%H:%M:%S}")

    def error(self, error: str, *, retry_in: float, since: datetime | None) -> None:
        """The last poll failed; the data on screen (if any) is older."""
        self.add_class("error")
        kept = f"; showing data from {since:%H:%M:%S}" if since else ""
        # On a narrow terminal the error's text is cut, not when it retries or the
        # age of the data on screen.
        self._set(
            f"error: {error} (retrying in {retry_in:g}s{kept})",
            Part(f"error: {error}", cut=True),
            Part(f"(retrying in {retry_in:g}s{kept})"),
        )

    def note(self, *parts: str | Part) -> None:
        """A view's own remark after the freshness; a plain string is never dropped."""
        self._remark = [Part(part) if isinstance(part, str) else part for part in parts]
        self.refresh()

    def _set(self, message: str, *head: Part) -> None:
        self.message = message
        self._head = list(head) or [Part(message)]
        self.refresh()

    def render(self) -> Text:
        """The line, fitted to the widget's width."""
        width = self.content_size.width or cell_len(_join(self._head, self._remark))
        remark = self._remark
        if self.has_class("error"):
            # The error says more than counts of data that is no longer fresh.
            remark = [Part(part.text, max(1, part.drop), part.cut) for part in remark]
        # Errors and project names come from the server: no control sequences.
        return Text(printable(fit(self._head, remark, width)), end="", no_wrap=True)
