"""The Item detail view: details, every dimension, pending events and the history timeline."""

from __future__ import annotations

import pydoc
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Header, Log, Static

from wq.cli.common import printable
from wq.client.errors import ClientError
from wq.client.vocabulary import ACTIONABLE_PHASES, phase_refusal
from wq.tui.detail_documents import OUTPUT_KEYS, Details, last_lines, summary
from wq.tui.entry import HistoryEntryScreen
from wq.tui.footer import FittingFooter
from wq.tui.format import (
    age,
    compact,
    dimension_label,
    dimension_mark,
    moment,
    short,
    short_id,
    state_change,
)
from wq.tui.polling import PollingScreen
from wq.tui.status import StatusLine
from wq.tui.table import RowTable, fill

HISTORY_LIMIT = 100
PENDING_LIMIT = 50
# The live output pane (`l`) shows this many of the run's last lines.
LOG_LINES = 200
# The kept output tail under the summary shows this many of its last lines (`o` and
# `l` show more).
OUTPUT_LINES = 20


@dataclass
class DetailData:
    """The item, its next pending events and the newest page of its history."""

    item: dict[str, Any]
    history: list[dict[str, Any]]
    pending: list[dict[str, Any]]
    more_pending: bool = False
    details: Details | None = None
    log: str | None = None  # the run's last lines, while the log pane is open


def _until(until: str | None, now: datetime) -> str:
    """`2026-01-05 12:14:00 (in 14m)`, or `-`."""
    return f"{moment(until)} ({age(until, now=now)})" if until else "-"


class ItemDetailScreen(PollingScreen):
    """One item, refreshed live."""

    # Below 120 columns the details go under the summary, with the whole width.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012
    BINDINGS = [  # noqa: RUF012
        Binding("escape", "back", "Back"),
        Binding("r", "retry", "Retry"),
        Binding("c", "cancel", "Cancel"),
        Binding("y", "copy", "Copy id"),
        Binding("o", "page", "Details"),
        Binding("l", "log", "Live output"),
    ]

    def __init__(self, item_id: str) -> None:
        super().__init__()
        self.item_id = item_id
        self.item: dict[str, Any] | None = None
        self.details: Details | None = None
        self.following = False  # the live output pane is open
        self.history: list[dict[str, Any]] = []  # the entries the History shows
        self._following_now = False  # what the fetch running now was asked for
        self._log_text: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="detail"):
            with Horizontal(id="detail-top"):
                yield Static("loading…", id="summary", markup=False)
                with VerticalScroll(id="details-pane"):
                    yield Static("", id="details", markup=False)
            yield Static("Output (last lines)", classes="section", id="output-title")
            yield Static("", id="output", markup=False)
            yield Log(id="log", max_lines=LOG_LINES * 2)
            yield Static("Dimensions", classes="section", id="dimensions-title")
            dimensions: DataTable[str] = RowTable(id="dimensions", cursor_type="row")
            for column in ("dimension", "state", "pending until", "updated", "detail"):
                dimensions.add_column(column, key=column)
            yield dimensions
            yield Static("Pending events", classes="section", id="pending-title")
            pending: DataTable[str] = RowTable(id="pending", cursor_type="row")
            for column in ("stored", "event", "event at", "payload"):
                pending.add_column(column, key=column)
            yield pending
            yield Static("History (newest first)", classes="section")
            history: DataTable[str] = RowTable(id="history", cursor_type="row")
            for column in ("at", "actor", "event", "old → new", "trigger"):
                history.add_column(column, key=column)
            yield history
        yield StatusLine()
        yield FittingFooter()

    def prepare(self) -> None:
        self._following_now = self.following

    def fetch(self) -> DetailData:
        api = self.wq.api
        item = api.item(self.item_id)
        pending = api.pending_events(self.item_id, limit=PENDING_LIMIT)
        history = api.history(self.item_id, limit=HISTORY_LIMIT)
        return DetailData(
            item,
            history["entries"],
            pending["events"],
            bool(pending.get("next_cursor")),
            Details.of(item.get("details") or {}),
            self._fetch_log() if self._following_now else None,
        )

    def _fetch_log(self) -> str:
        """The run's last lines as the server has them now, or why there are none.

        Read again at each refresh rather than held open: a silent run then holds no
        connection, and the view's back-off covers a server that went away."""
        try:
            text = "".join(self.wq.api.logs(self.item_id, tail=LOG_LINES))
        except ClientError as err:
            return f"({err.message})"
        return printable(text) if text else "(no output yet)"

    @property
    def offered_type(self) -> str | None:
        """This item's type, once loaded: whoami grants retry per type."""
        return self.item["type"] if self.item is not None else None

    def current(self) -> dict[str, Any] | None:
        """This item, once loaded."""
        return self.item

    def show(self, data: DetailData) -> None:
        before = self.item
        item = self.item = data.item
        if before is None or (before["type"], before["phase"]) != (item["type"], item["phase"]):
            self.refresh_bindings()  # r and c, offered or not for this type and phase
        now = self.wq.now()
        self.query_one("#summary", Static).update(summary(item))
        self._show_details(data.details or Details.of(item.get("details") or {}))
        self._show_log(data.log)
        dimensions = self.query_one("#dimensions", DataTable)
        fill(
            dimensions,
            [
                (
                    dimension_label(row),
                    [
                        dimension_label(row),
                        dimension_mark(row, now),
                        _until(row.get("pending_until"), now),
                        age(row.get("updated_at"), now=now),
                        short(compact(row.get("detail")), 60),
                    ],
                )
                for row in item["dimensions"]
            ],
        )
        self.query_one("#dimensions-title", Static).update(
            "Dimensions" if item["dimensions"] else "Dimensions: none"
        )
        dimensions.display = bool(item["dimensions"])
        self._show_pending(data, now)
        history = self.query_one("#history", DataTable)
        self.history = data.history
        fill(
            history,
            [
                (
                    str(entry["id"]),
                    [
                        moment(entry["at"]),
                        entry["actor"],
                        entry["event_type"],
                        short(state_change(entry.get("old_state"), entry.get("new_state")), 60),
                        short(compact(entry.get("trigger")), 30),
                    ],
                )
                for entry in data.history
            ],
        )
        # The short id: the summary above shows the whole one.
        self.status.note(f"item {short_id(self.item_id)}: {len(data.history)} history entries")

    def _show_details(self, details: Details) -> None:
        """The details pane, and a task's output as text below the summary."""
        if self.details is None or details.text != self.details.text:
            self.query_one("#details", Static).update(details.preview)
        output = self.query_one("#output", Static)
        if self.details is None or details.output != self.details.output:
            output.update(last_lines(details.output or "", OUTPUT_LINES))
        output.display = bool(details.output)
        self.query_one("#output-title", Static).display = bool(details.output)
        self.details = details

    def _show_log(self, text: str | None) -> None:
        """The live output pane in place of the kept tail, while it is open."""
        log = self.query_one("#log", Log)
        log.display = self.following
        if self.following:
            self.query_one("#output", Static).display = False
            self.query_one("#output-title", Static).update(
                f"Output (live, last {LOG_LINES} lines; l closes)"
            )
            self.query_one("#output-title", Static).display = True
        else:
            self.query_one("#output-title", Static).update("Output (last lines)")
        if text is not None and text != self._log_text:
            log.clear()
            log.write(text)
            self._log_text = text

    def action_log(self) -> None:
        """Open (or close) the live output pane of a task."""
        if self.item is not None and self.item.get("type") != "task":
            self.notify(f"{self.item.get('type')} items have no output of their own")
            return
        self.following = not self.following
        self._log_text = None
        if self.details is not None:
            details, self.details = self.details, None
            self._show_details(details)
        self._show_log(None)
        if self.following:  # in view at once, on a short terminal too
            self.call_after_refresh(
                self.query_one("#output-title", Static).scroll_visible, top=True
            )
        self.schedule(0)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a History row: the entry whole (its row cuts what it changed)."""
        if event.data_table.id != "history":
            return
        key = event.row_key.value
        entry = next((entry for entry in self.history if str(entry["id"]) == key), None)
        if entry is not None:
            self.app.push_screen(HistoryEntryScreen(entry))

    def action_page(self) -> None:
        """The whole details document in $PAGER (the terminal is handed over meanwhile)."""
        if self.details is None:
            return
        text = self.details.text
        if self.details.output:
            text += f"\n\n{OUTPUT_KEYS[0]}:\n{self.details.output}"
        try:
            with self.app.suspend():
                pydoc.pager(text)
        except SuspendNotSupported:
            self.notify("cannot hand the terminal to a pager here", severity="warning")

    def _show_pending(self, data: DetailData, now: datetime) -> None:
        """Events stored and not applied yet (usually none: they apply within moments)."""
        table = self.query_one("#pending", DataTable)
        fill(
            table,
            [
                (
                    str(event["id"]),
                    [
                        age(event.get("created_at"), now=now),
                        event["event_type"],
                        moment(event.get("event_at")),
                        short(compact(event.get("payload")), 60),
                    ],
                )
                for event in data.pending
            ],
        )
        count = f"{len(data.pending)}{'+' if data.more_pending else ''}"
        title = (
            f"Pending events ({count}, next applied first)"
            if data.pending
            else "Pending events: none"
        )
        self.query_one("#pending-title", Static).update(title)
        table.display = bool(data.pending)

    def action_back(self) -> None:
        """Back to the list."""
        self.dismiss()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """As every view; besides, retry and cancel only for an item in a phase they
        apply to (a key pressed anyway says why, `WqApp.action_refuse`)."""
        offered = super().check_action(action, parameters)
        if offered and action in ACTIONABLE_PHASES and self.item is not None:
            return phase_refusal(action, self.item.get("phase")) is None
        return offered

    def action_retry(self) -> None:
        """Retry this item, after confirmation."""
        if self.item is not None:
            self.wq.confirm_retry(self.item, done=lambda: self.schedule(0))

    def action_cancel(self) -> None:
        """Cancel this item, after confirmation."""
        if self.item is not None:
            self.wq.confirm_cancel(self.item, done=lambda: self.schedule(0))

    def action_copy(self) -> None:
        """Copy this item's id."""
        self.wq.copy_id(self.item_id)
