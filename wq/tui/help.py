"""The `?` help: every key and command."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """\
wq tui — keys

  p / :pools         per-project pools (enter: that project's items)
  i / :items         work items (enter: detail, esc: back)
  :items k=v ...     filter on the server: type, phase, project, admission
  :items all         drop the filters
  /                  filter the loaded items by text (id, type, project, phase, error)
  r                  retry the item (asks first; not in --readonly or without permission)
  c                  cancel the item (asks first; same rules as r)
  y                  copy the item id
  :q / q             quit
  ?                  this help (esc closes)

The views refresh by themselves; errors show in the status line and the last good
data stays on screen until the server answers again.
"""


class HelpScreen(ModalScreen[None]):
    """Keys and commands."""

    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]  # noqa: RUF012

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP, markup=False)
