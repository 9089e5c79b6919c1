"""The status line under every view: when the data is from, or what went wrong."""

from __future__ import annotations

from datetime import datetime

from textual.widgets import Static

from wq.cli.common import printable


class StatusLine(Static):
    """One line: `updated 12:00:03`, or the last error with the retry delay."""

    DEFAULT_CSS = """
    StatusLine { height: 1; padding: 0 1; background: $panel; }
    StatusLine.error { background: $error 40%; }
    """

    def __init__(self) -> None:
        super().__init__("connecting…", markup=False)
        self.message = "connecting…"
        self.extra = ""

    def ok(self, at: datetime) -> None:
        """The data on screen is fresh."""
        self.remove_class("error")
        self._set(f"updated {at:%H:%M:%S}")

    def error(self, error: str, *, retry_in: float, since: datetime | None) -> None:
        """The last poll failed; the data on screen (if any) is older."""
        self.add_class("error")
        kept = f"; showing data from {since:%H:%M:%S}" if since else ""
        self._set(f"error: {error} (retrying in {retry_in:g}s{kept})")

    def note(self, extra: str) -> None:
        """A view's own remark after the freshness (counts, filters)."""
        self.extra = extra
        self._set(self.message)

    def _set(self, message: str) -> None:
        self.message = message
        # Errors and project names come from the server: no control sequences.
        self.update(printable(f"{message}   {self.extra}" if self.extra else message))
