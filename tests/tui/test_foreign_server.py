"""A server that is not wq (or answers what wq does not expect): the TUI says so and lives.

Every view's poll, the header's whoami and the item detail get an answer of another
shape; each shows `unexpected answer from URL: ...` where it shows errors, keeps
retrying, and the app keeps running: keys still switch views.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from textual.pilot import Pilot

from tests.fakes.foreign import ForeignServer
from tests.tui.conftest import until
from wq.client.api import ApiClient
from wq.client.credentials import Credentials
from wq.tui.app import WqApp
from wq.tui.detail import ItemDetailScreen
from wq.tui.items import ItemsScreen
from wq.tui.queue import QueueScreen
from wq.tui.status import StatusLine


async def shows_error(app: WqApp, pilot: Pilot[None], screen: type, request: str) -> str:
    """Wait until `screen` is on top with an error in its status line; that error."""

    def status() -> str:
        lines = app.screen.query(StatusLine) if isinstance(app.screen, screen) else []
        return str(lines[0].message) if lines else ""  # a screen just pushed has none yet

    await until(pilot, lambda: status().startswith("error:"), message=f"{request}'s error")
    return status()


@pytest.mark.parametrize("kind", ["object", "list-of-objects", "html"])
def test_an_unexpected_answer_is_shown_and_the_app_keeps_running(kind: str) -> None:
    async def main() -> None:
        with ForeignServer(kind) as server:
            credentials = Credentials(server.url, environ={"WQ_TOKEN": "t"}, login=None)
            with ApiClient(server.url, credentials=credentials, timeout=5.0) as api:
                app = WqApp(api, refresh=0.3)
                async with app.run_test(size=(120, 36)) as pilot:
                    await scenario(app, pilot, server.url)
                assert app.return_code in (None, 0)

    async def scenario(app: WqApp, pilot: Pilot[None], url: str) -> None:
        unexpected = f"unexpected answer from {url}: "
        overview = await shows_error(app, pilot, type(app.screen), "GET /api/stats")
        assert unexpected + "GET /api/stats" in overview
        await until(pilot, lambda: "unexpected answer" in str(app.sub_title), message="whoami")
        await pilot.press("i")
        items = await shows_error(app, pilot, ItemsScreen, "GET /api/work-items")
        assert unexpected + "GET /api/work-items" in items
        await pilot.press("u")
        queue = await shows_error(app, pilot, QueueScreen, "GET /api/pools")
        assert unexpected in queue
        app.open_item(str(uuid.UUID(int=1)))
        detail = await shows_error(app, pilot, ItemDetailScreen, "GET /api/work-items/ID")
        assert unexpected + f"GET /api/work-items/{uuid.UUID(int=1)}" in detail
        assert app.is_running

    asyncio.run(main())
