"""What the views need from the app: the API, the clock, navigation and the actions.

The app (`wq.tui.app.WqApp`) implements it; a view reaches it through
`PollingScreen.wq`, typed by this protocol, so no view imports the app, which imports
every view.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from wq.client.api import ApiClient


class Dashboard(Protocol):
    """The app as the views see it."""

    api: ApiClient
    refresh_seconds: float
    readonly: bool
    now: Callable[[], datetime]
    filters: dict[str, str]
    listings: int  # how many times `show_items` asked for a list of items anew
    queue_project: str | None

    def refusal(self, item_type: str | None = None) -> str | None:
        """Why retry and cancel are refused (on this type, or on every type), or None."""

    def show_items(self, **filters: str) -> None:
        """The Items view with these server-side filters, without the `/` text."""

    def show_queue(self, project: str | None = None) -> None:
        """The Queue view of `project` (the last one, or the most pressed)."""

    def switch_mode(self, mode: str) -> Any:
        """Another view by name."""

    def open_item(self, item_id: str) -> None:
        """The detail of one item."""

    def prompt(self, prefix: str, value: str, done: Callable[[str | None], None]) -> None:
        """Ask for one line."""

    def run_command(self, line: str | None) -> None:
        """Run one `:` command."""

    def copy_id(self, item_id: str) -> None:
        """Copy an item id to the clipboard."""

    def confirm_retry(self, item: dict[str, Any], done: Callable[[], None]) -> None:
        """Ask, then retry the item."""

    def confirm_cancel(self, item: dict[str, Any], done: Callable[[], None]) -> None:
        """Ask, then cancel the item."""

    def confirm_many(
        self, action: str, items: list[dict[str, Any]], done: Callable[[], None]
    ) -> None:
        """Ask once, then retry or cancel all of these items."""
