"""The `wq tui` app: wires the views, the header identity, actions and commands.

The views live in their own modules; this module only holds what they share: the API
client, the whoami document (who may retry), the server-side item filters, and the
dialogs that actions open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import App
from textual.binding import Binding, BindingType

from wq.client.api import ApiClient
from wq.client.errors import ClientError
from wq.client.shown import counted
from wq.client.vocabulary import ACTIONABLE_PHASES, ADMISSIONS, PHASES, phase_refusal
from wq.tui.commands import ProjectCommands
from wq.tui.dashboard import Dashboard
from wq.tui.detail import ItemDetailScreen
from wq.tui.dialogs import ConfirmScreen, PromptScreen
from wq.tui.format import short
from wq.tui.help import HelpScreen
from wq.tui.items import ItemsScreen
from wq.tui.messages import Acted, Identified
from wq.tui.overview import OverviewScreen
from wq.tui.polling import PollingScreen
from wq.tui.pools import PoolsScreen
from wq.tui.queue import QueueScreen

FILTER_KEYS = ("type", "phase", "project", "admission")
CHOICES = {"phase": PHASES, "admission": ADMISSIONS}
WHOAMI_RETRY = 5.0


VIEWS = Binding.Group("Views")


class WqApp(App[None]):
    """A live dashboard of one wq daemon."""

    TITLE = "wq"
    CSS_PATH = Path(__file__).with_name("wq.tcss")
    MODES: ClassVar[dict[str, Any]] = {
        "overview": OverviewScreen,
        "pools": PoolsScreen,
        "queue": QueueScreen,
        "items": ItemsScreen,
    }
    DEFAULT_MODE = "overview"
    COMMANDS = App.COMMANDS | {ProjectCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        # One footer entry for the four ("o p u i Views"): at 80 columns a view's own
        # keys need the room; `?` names each.
        Binding("o", "view('overview')", "Overview", group=VIEWS),
        Binding("p", "view('pools')", "Pools", group=VIEWS),
        Binding("u", "view('queue')", "Queue", group=VIEWS),
        Binding("i", "view('items')", "Items", group=VIEWS),
        # Before the view's own keys: the keys typed behind `:` in one burst (a paste,
        # a fast typist) then reach the command line, not the view's table.
        Binding("colon", "command", "Command", key_display=":", priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        # Ctrl-C quits, as in any terminal program (Textual's own binding only says how).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        # In read-only mode the views hide r and c (`PollingScreen.check_action`), and a
        # key press reaches these: it says why nothing happens.
        Binding("r", "refuse('retry')", show=False),
        Binding("c", "refuse('cancel')", show=False),
    ]

    def __init__(
        self,
        api: ApiClient,
        *,
        refresh: float = 2.0,
        readonly: bool = False,
        clock: Callable[[], datetime] | None = None,
        view: str = "overview",
    ) -> None:
        if view not in self.MODES:
            raise ValueError(f"no view {view!r}: one of {', '.join(self.MODES)}")
        # The view shown first: Textual starts in DEFAULT_MODE, read by App.__init__.
        self.DEFAULT_MODE = view  # type: ignore[misc]
        super().__init__()
        # Ages and countdowns read this clock (a fixed one makes snapshots repeatable).
        self.now: Callable[[], datetime] = clock or (lambda: datetime.now().astimezone())
        self.queue_project: str | None = None
        self.api = api
        self.refresh_seconds = refresh
        self.readonly = readonly
        self.whoami: dict[str, Any] | None = None
        self.filters: dict[str, str] = {}
        self.listings = 0
        self.types: list[str] | None = None  # the server's item types, once asked
        self.sub_title = self._identity_line("…")

    # Identity ----------------------------------------------------------------------

    def on_mount(self) -> None:
        self._identify()

    @work(thread=True, exclusive=True, exit_on_error=False, group="whoami")
    def _identify(self) -> None:
        try:
            self.post_message(Identified(self.api.whoami()))
        except ClientError as err:
            self.call_from_thread(self._identify_failed, err.message)

    def _identify_failed(self, error: str) -> None:
        self.sub_title = self._identity_line(f"? ({short(error, 40)})")
        self.set_timer(WHOAMI_RETRY, self._identify)

    @on(Identified)
    def _identified(self, message: Identified) -> None:
        self.whoami = message.whoami
        name = message.whoami.get("authentication", {}).get("identity") or "?"
        self.sub_title = self._identity_line(str(name))
        self.refresh_bindings()  # r and c, offered or not by the permissions

    def _identity_line(self, who: str) -> str:
        return f"{who} @ {self.api.url}{'  [readonly]' if self.readonly else ''}"

    def refusal(self, item_type: str | None = None) -> str | None:
        """Why retry and cancel are refused (on this type, if given; else on every
        type), or None when whoami grants them."""
        if self.readonly:
            return "read-only mode"
        if self.may_retry(item_type):
            return None
        return f"no retry permission on {item_type}" if item_type else "no retry permission"

    def may_retry(self, item_type: str | None = None) -> bool:
        """Retry is offered: not read-only, and whoami grants it (on this type, if given)."""
        if self.readonly or self.whoami is None:
            return False
        permissions = self.whoami.get("authorization", {}).get("effective_permissions", {})
        if item_type is not None:
            return "retry" in permissions.get(item_type, [])
        return any("retry" in granted for granted in permissions.values())

    # Navigation --------------------------------------------------------------------

    def show_items(self, **filters: str) -> None:
        """The Items view with these server-side filters, listed anew: without the `/`
        text of the list before (as a `:` command does in k9s)."""
        self.filters = {key: value for key, value in filters.items() if value}
        self.listings += 1
        self._show_now("items")

    def show_queue(self, project: str | None = None) -> None:
        """The Queue view of `project` (the one shown last, or the most pressed, if None)."""
        if project:
            self.queue_project = project
        self._show_now("queue")

    def action_view(self, mode: str) -> None:
        """Show a view: its own screen, not an item's detail left open over it."""
        self._show_now(mode)

    def _show_now(self, mode: str) -> None:
        # Switching to a view polls it; a view already shown would keep what it shows
        # until its next refresh, so it is asked now (for the list a command asked for).
        if mode == self.current_mode:
            for screen in self.screen_stack:
                if isinstance(screen, PollingScreen):
                    screen.schedule(0)
        self.switch_mode(mode)
        # A detail opened from this view earlier would stay over it, the view (a new
        # list, say) out of sight and `r`/`c` acting on that detail's item.
        details = 0
        for screen in reversed(self.screen_stack[1:]):
            if not isinstance(screen, ItemDetailScreen):
                break
            details += 1
        for _ in range(details):
            self.pop_screen()

    def open_item(self, item_id: str) -> None:
        """Push the detail of one item."""
        self.push_screen(ItemDetailScreen(item_id))

    def action_help(self) -> None:
        """Show the keys."""
        self.push_screen(HelpScreen())

    def prompt(self, prefix: str, value: str, done: Callable[[str | None], None]) -> None:
        """Ask for one line."""
        self.push_screen(PromptScreen(prefix, value), done)

    def action_command(self) -> None:
        """The `:` command line."""
        self.prompt(":", "", self.run_command)

    def run_command(self, line: str | None) -> None:
        """Run one `:` command (`pools`, `queue [PROJECT]`, `items [key=value ...]`, `q`)."""
        words = (line or "").split()
        if not words:
            return
        verb, args = words[0], words[1:]
        if verb in ("q", "quit"):
            self.exit()
        elif verb in ("o", "overview"):
            self._show_now("overview")
        elif verb in ("p", "pools"):
            self._show_now("pools")
        elif verb in ("u", "queue"):
            if len(args) > 1:  # a project name holds no space: this is a typo
                self._refuse(f"one project at most: :{verb} [PROJECT] (got {len(args)})")
                return
            if not args:
                self.queue_project = None  # `:queue` alone: the most pressed project
            self.show_queue(args[0] if args else None)
        elif verb in ("i", "items"):
            self._items_command(args)
        elif verb in ("h", "help"):
            self.action_help()
        else:
            self.notify(f"unknown command :{verb} (? for help)", severity="error", markup=False)

    def _items_command(self, args: list[str]) -> None:
        """`:items [key=value ...]`: the Items view with these filters, checked first."""
        # A new command, new filters: those of the list before are not kept (`f` puts
        # them on the line to edit). `all` is what `:items` alone lists.
        filters: dict[str, str] = {}
        for arg in args[1:] if args[:1] == ["all"] else args:
            key, sep, value = arg.partition("=")
            if not sep or key not in FILTER_KEYS:
                self._refuse(f"not a filter: {arg!r} (use {'|'.join(FILTER_KEYS)}=VALUE)")
                return
            choices = CHOICES.get(key)
            if choices and value not in choices:
                # Refused here: the server would answer 422 at every refresh.
                self._refuse(f"{key}={value!r}: use one of {', '.join(choices)}")
                return
            filters[key] = value
        if "type" in filters:
            self._show_items_of_known_type(filters)
        else:
            self.show_items(**filters)

    @work(thread=True, exclusive=True, exit_on_error=False, group="types")
    def _show_items_of_known_type(self, filters: dict[str, str]) -> None:
        # The server answers an unknown type with an empty list, as if it had no such
        # items: asked (once) for its types, as `wq status --type` does, to say so.
        # When the server cannot say, the list is shown as it gives it.
        if self.types is None:
            with contextlib.suppress(ClientError):
                self.types = [entry["type"] for entry in self.api.submission_types()]
        known = self.types
        if known is not None and filters["type"] not in known:
            message = f"type={filters['type']!r}: this server knows {', '.join(known) or 'none'}"
            self.call_from_thread(self._refuse, message)
        else:
            self.call_from_thread(self.show_items, **filters)

    def _refuse(self, message: str) -> None:
        self.notify(message, severity="error", markup=False)

    # Actions ----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Nothing once the app exits (keys typed right behind `q` would open views it
        is taking down); `refuse` only where the view has the action and it is refused
        (the view then hides its own key, `PollingScreen.check_action`)."""
        if self.return_code is not None:
            return False
        if action == "command" and isinstance(self.screen, PromptScreen):
            return False  # a `:` typed into a prompt's line is text
        if action == "refuse":
            screen = self.screen
            return (
                isinstance(screen, PollingScreen)
                and hasattr(screen, f"action_{parameters[0]}")
                and self._refused(str(parameters[0]), screen) is not None
            )
        return True

    def _refused(self, action: str, screen: PollingScreen) -> str | None:
        """Why a view that hides `action` (retry, cancel) does: read-only mode, no
        permission, or (an item's detail) the item's phase; None if it offers it."""
        refusal = self.refusal(screen.offered_type)
        if refusal is not None:
            return refusal
        item = screen.current()
        if isinstance(screen, ItemDetailScreen) and item is not None:
            return phase_refusal(action, item.get("phase"))
        return None

    def action_refuse(self, action: str) -> None:
        """Say why `action` (retry, cancel) does nothing: read-only mode, or no permission
        (on the type of the item under the cursor)."""
        screen = self.screen
        item = screen.current() if isinstance(screen, PollingScreen) else None
        reason = self.refusal(item.get("type") if item else None)
        if reason is None and isinstance(screen, ItemDetailScreen) and item is not None:
            why_not = phase_refusal(action, item.get("phase"))
            if why_not is not None:
                self.notify(f"{action}: {why_not}", severity="warning", markup=False)
                return
        reason = reason or "no retry permission"
        self.notify(f"{action} refused: {reason}", severity="warning", markup=False)

    def copy_id(self, item_id: str) -> None:
        """Copy an item id to the clipboard (OSC 52)."""
        self.copy_to_clipboard(item_id)
        self.notify(f"copied {item_id}")

    def confirm_retry(self, item: dict[str, Any], done: Callable[[], None]) -> None:
        """Ask, then retry; refused outright in read-only mode or without permission."""
        self._confirm("retry", item, done)

    def confirm_cancel(self, item: dict[str, Any], done: Callable[[], None]) -> None:
        """Ask, then cancel an active item; refused as retry is (the same permission)."""
        self._confirm("cancel", item, done)

    def confirm_many(
        self, action: str, items: list[dict[str, Any]], done: Callable[[], None]
    ) -> None:
        """Ask once, then retry or cancel every item in one request per phase."""
        refused = sorted({item["type"] for item in items if not self.may_retry(item["type"])})
        if refused:
            reason = self.refusal(refused[0]) or "no retry permission"
            self.notify(f"{action} refused: {reason}", severity="warning", markup=False)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._act_many(action, items, done)

        question = f"{action.capitalize()} the {counted(len(items), 'marked item')}?"
        self.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, exit_on_error=False, group="action")
    def _act_many(self, action: str, items: list[dict[str, Any]], done: Callable[[], None]) -> None:
        # The bulk routes take one phase a request: a retry sends the failed and the
        # cancelled apart; the ids keep each to exactly the marked items.
        phases = ACTIONABLE_PHASES[action]
        outcomes: list[dict[str, Any]] = []
        try:
            for phase in phases:
                ids = [item["id"] for item in items if item["phase"] == phase]
                if ids:
                    selector = {"ids": ids, "phase": phase, "limit": len(ids)}
                    outcomes += self.api.bulk(action, selector, dry_run=False)["results"]
        except ClientError as err:
            self.call_from_thread(
                self.notify, f"{action} failed: {err.message}", severity="error", markup=False
            )
        else:
            done_count = sum(1 for o in outcomes if o["outcome"] != "skipped")
            left = len(items) - done_count
            note = f"{action}: {done_count} of {counted(len(items), 'marked item')}"
            self.call_from_thread(
                self.notify, note + (f", {left} not (not in a state for it)" if left else "")
            )
        self.call_from_thread(done)

    def _confirm(self, action: str, item: dict[str, Any], done: Callable[[], None]) -> None:
        reason = self.refusal(item["type"])
        if reason is not None:
            self.notify(f"{action} refused: {reason}", severity="warning", markup=False)
            return
        # Said at once, not after a question the server would answer 409 to.
        why_not = phase_refusal(action, item.get("phase"))
        if why_not is not None:
            self.notify(f"{action}: {why_not}", severity="warning", markup=False)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(action, item["id"], done)

        question = f"{action.capitalize()} {item['type']} item {item['id']} ({item['phase']})?"
        self.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, exit_on_error=False, group="action")
    def _act(self, action: str, item_id: str, done: Callable[[], None]) -> None:
        try:
            if action == "cancel":
                outcome = str(self.api.cancel(item_id).get("action") or "cancelled")
            else:
                self.api.retry(item_id)
                outcome = "retried"
        except ClientError as err:
            self.post_message(Acted(action, item_id, error=err.message))
        else:
            self.post_message(Acted(action, item_id, outcome=outcome))
        self.call_from_thread(done)

    @on(Acted)
    def _acted(self, message: Acted) -> None:
        if message.error:
            # The server's words: shown as they are, never read as markup.
            self.notify(f"{message.action} failed: {message.error}", severity="error", markup=False)
        elif message.outcome == "requested":
            self.notify(f"cancel requested: {message.item_id} stops when its run does")
        else:
            self.notify(f"{message.outcome} {message.item_id}")


def _keeps_the_views_contract(app: WqApp) -> Dashboard:
    # Never called: mypy checks here that the app is what the views expect of it.
    return app
