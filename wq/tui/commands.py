"""The command palette's projects (ctrl+p): type part of a project's name, jump to its
items or its queue. The projects are those with work (the pools) and those of recent
items, fetched once when the palette opens."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from wq.client.errors import ClientError
from wq.tui.dashboard import Dashboard

RECENT_ITEMS = 200


class ProjectCommands(Provider):
    """`Items of PROJECT` and `Queue of PROJECT` for every project known to the server."""

    projects: list[str]

    @property
    def dashboard(self) -> Dashboard:
        """The app, as the views see it."""
        return cast(Dashboard, self.app)

    async def startup(self) -> None:
        """Fetch the projects (off the UI thread); none when the server cannot answer."""
        try:
            self.projects = await asyncio.to_thread(self._projects)
        except ClientError:
            self.projects = []

    def _projects(self) -> list[str]:
        api = self.dashboard.api
        busy = [str(pool["project"]) for pool in api.pools()]
        recent = api.items_page(limit=RECENT_ITEMS).get("items", [])
        return sorted({*busy, *(str(item["project"]) for item in recent)})

    def _commands(self) -> list[tuple[str, partial[None], str]]:
        app = self.dashboard
        commands: list[tuple[str, partial[None], str]] = []
        for project in self.projects:
            commands.append(
                (f"Items of {project}", partial(app.show_items, project=project), "its items")
            )
            commands.append((f"Queue of {project}", partial(app.show_queue, project), "its FIFO"))
        return commands

    async def discover(self) -> Hits:
        """Every project's commands, before anything is typed."""
        for text, run, help_text in self._commands():
            yield DiscoveryHit(text, run, help=help_text)

    async def search(self, query: str) -> Hits:
        """The commands whose text matches the query fuzzily, best first."""
        matcher = self.matcher(query)
        for text, run, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), run, help=help_text)
