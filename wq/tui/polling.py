"""Live refresh the Dolphie way, for every view.

A view's `fetch` runs in a thread worker and posts `Loaded` or `Failed`; the next poll
is scheduled only when the last one has finished, so a slow server is never asked twice
at once. Polls are skipped while the view is not on top (a modal, another view) and
resume at once when it is. Errors back off exponentially, keep the last good data on
screen and show in the status line; the first good answer clears them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from textual import on, work
from textual.app import ScreenStackError
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from wq.client.errors import ClientError
from wq.tui.dashboard import Dashboard
from wq.tui.messages import Failed, Loaded
from wq.tui.status import StatusLine

MAX_BACKOFF = 30.0
# The views' actions that change items (the same names in every view that has them).
READ_WRITE_ACTIONS = frozenset({"retry", "cancel"})


class PollingScreen(Screen[None]):
    """A screen whose data comes from `fetch` (blocking, in a worker) and goes to `show`."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.busy = False
        self.last_good: datetime | None = None
        self._timer: Timer | None = None

    @property
    def wq(self) -> Dashboard:
        """The app, as the views see it (`wq.tui.dashboard`)."""
        return cast(Dashboard, self.app)

    # Subclasses ------------------------------------------------------------------

    def fetch(self) -> Any:
        """Get the view's data (runs in a worker thread; may raise `ClientError`)."""
        raise NotImplementedError

    def show(self, data: Any) -> None:
        """Put fetched data on screen (runs on the UI thread)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Before a fetch, on the UI thread: note what it needs from the screen."""

    @property
    def offered_type(self) -> str | None:
        """The item type whose permission decides whether r and c are offered: None
        on a list (offered when whoami grants retry on any type)."""
        return None

    def current(self) -> dict[str, Any] | None:
        """The item r, c and y act on (the one under the cursor), if any."""
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No action once the app exits (its screens are being taken down). Retry and
        cancel are not offered in read-only mode nor without the retry permission:
        False hides their keys from the footer (the app's hidden fallback then says
        why, if pressed)."""
        if self.closing:
            return False
        return not (action in READ_WRITE_ACTIONS and self.wq.refusal(self.offered_type))

    # Scheduling ------------------------------------------------------------------

    def on_mount(self) -> None:
        self.poll()

    def on_screen_resume(self) -> None:
        if not self.busy:
            self.schedule(0)

    def schedule(self, delay: float) -> None:
        """Poll after `delay` seconds (replacing any poll already planned)."""
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(max(delay, 0.001), self.poll)

    @property
    def closing(self) -> bool:
        """Whether the app is exiting: its screens are being taken down (keys typed
        right behind `q` may still open a view), so nothing is fetched or shown."""
        return self.app.return_code is not None

    def poll(self) -> None:
        """Fetch now unless the view is hidden or a poll is still running."""
        if self.busy or self.closing:
            return
        try:
            top = self.app.screen
        except ScreenStackError:
            return  # the app is closing: a timer fired after the last screen went
        # Not `is_current`: that stays true for a screen seen behind a modal dialog.
        if top is not self:
            self.schedule(self.wq.refresh_seconds)
            return
        self.busy = True
        self.prepare()
        self._fetch()

    @work(thread=True, exclusive=True, exit_on_error=False, group="poll")
    def _fetch(self) -> None:
        try:
            data = self.fetch()
        except ClientError as err:
            self.post_message(Failed(err.message))
        else:
            self.post_message(Loaded(data))

    @on(Worker.StateChanged)
    def _worker_failed(self, event: Worker.StateChanged) -> None:
        # The one place where an unexpected worker error becomes a visible notice.
        if event.state is WorkerState.ERROR:
            self.post_message(Failed(f"{type(event.worker.error).__name__}: {event.worker.error}"))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        message.stop()
        self.busy = False
        if self.closing:
            return
        self.failures = 0
        self.last_good = self.wq.now()
        try:
            self.show(message.data)
        finally:
            self.status.ok(self.last_good)
            self.schedule(self.wq.refresh_seconds)

    @on(Failed)
    def _failed(self, message: Failed) -> None:
        message.stop()
        self.busy = False
        if self.closing:
            return
        self.failures += 1
        delay = min(MAX_BACKOFF, self.wq.refresh_seconds * 2 ** (self.failures - 1))
        self.status.error(message.error, retry_in=delay, since=self.last_good)
        self.schedule(delay)

    @property
    def status(self) -> StatusLine:
        """This view's status line."""
        return self.query_one(StatusLine)
