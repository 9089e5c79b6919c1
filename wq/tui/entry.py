"""One history entry of an item, whole: what its row in the detail's History cuts."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from wq.tui.dialogs import Dialog
from wq.tui.format import changes, compact, moment


def entry_text(entry: dict[str, Any]) -> Text:
    """The entry: when, who and what, then each change on a line, then its trigger."""
    text = Text()
    text.append(f"{moment(entry.get('at'))}  {entry.get('event_type')}\n", style="bold")
    text.append(f"by {entry.get('actor')}\n\n")
    old, new = entry.get("old_state"), entry.get("new_state")
    if old is None and isinstance(new, dict):
        old = {}  # a creation: each of its keys on a line, from nothing
    for line in changes(old, new):
        text.append(f"{line}\n")
    text.append(f"\ntrigger: {compact(entry.get('trigger'))}")
    return text


class HistoryEntryScreen(Dialog[None]):
    """A history entry over the detail (enter on its row; esc closes)."""

    BINDINGS = [Binding("escape,enter,q", "dismiss", "Close")]  # noqa: RUF012

    def __init__(self, entry: dict[str, Any]) -> None:
        super().__init__()
        self.entry = entry

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="entry"):
            yield Static(entry_text(self.entry), markup=False)
