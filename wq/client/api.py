"""`ApiClient`: the one HTTP client of the CLI and the TUI.

It returns the server's JSON documents unchanged (dicts and lists), so `-o json` prints
exactly what the API said, and it turns every failure into a typed `ClientError`
whose message is one readable line. Each answer is checked against its shape
(`wq.client.schemas`) first: a server that answers something else (another service at
that URL, an older or broken one) is a `ServerError` naming the URL and what was
wrong, never a `KeyError` in whoever reads the document. Thread-safe: the TUI shares
one instance between its worker threads (`@work(thread=True)`); httpx's client and
`Credentials` both are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from wq.client.transport import CONNECT_TIMEOUT, ApiTransport, Json, bearer_header

MAX_PAGE = 500  # the API's largest page
MAX_QUEUE = 1000  # the API's largest queue listing
SUBMIT_PATH = re.compile(r"^/api/work-items/([a-z][a-z0-9_-]*)$")


class ApiClient(ApiTransport):
    """Talks to one wq daemon; see the module docstring."""

    def health(self) -> Json:
        """`/healthz` (no credentials)."""
        from wq.client.schemas import Health

        return self.request("GET", "/healthz", auth=False, shape=Health)

    def whoami(self) -> Json:
        """The caller's identity and permissions, as the server documents them."""
        from wq.client.schemas import WhoamiPublic

        return self.request("GET", "/api/whoami", shape=WhoamiPublic)

    def pools(self) -> list[Json]:
        """Every project with queued or in-flight work and its pool usage."""
        from wq.client.schemas import Pools

        result: list[Json] = self.request("GET", "/api/pools", shape=Pools)
        return result

    def replicas(self) -> list[Json]:
        """Every daemon sharing the database: alive first, then lost."""
        from wq.client.schemas import Replicas

        result: list[Json] = self.request("GET", "/api/replicas", shape=Replicas)
        return result

    def pool(self, project: str) -> Json:
        """One project's pool."""
        from wq.client.schemas import PoolPublic

        # Dots escaped too: a `..` segment would otherwise be resolved by the URL and
        # ask for another endpoint (`../work-items`), not for that project.
        path = quote(project, safe="/").replace(".", "%2E")
        return self.request("GET", f"/api/pools/{path}", shape=PoolPublic)

    def queue(self, project: str, *, lane: str | None = None, limit: int = 100) -> list[Json]:
        """A project's queued items in admission order."""
        from wq.client.schemas import QueueEntries

        result: list[Json] = self.request(
            "GET",
            "/api/queue",
            params={"project": project, "lane": lane, "limit": limit},
            shape=QueueEntries,
        )
        return result

    def queue_page(
        self, project: str, lane: str, *, limit: int = 100, cursor: str | None = None
    ) -> Json:
        """One page of a lane's queue with true positions (`entries`, `next_cursor`)."""
        from wq.client.schemas import QueuePagePublic

        return self.request(
            "GET",
            f"/api/queue/{quote(lane, safe='')}",
            params={"project": project, "limit": limit, "cursor": cursor},
            shape=QueuePagePublic,
        )

    def bulk(self, action: str, selector: dict[str, Any], *, dry_run: bool) -> Json:
        """Retry or cancel (`action`) the items `selector` matches; one request for all."""
        from wq.client.schemas import BulkPublic

        body = {key: value for key, value in selector.items() if value is not None}
        return self.request(
            "POST",
            f"/api/work-items/{action}",
            json={**body, "dry_run": dry_run},
            shape=BulkPublic,
        )

    def stats(
        self,
        *,
        window: str = "1h",
        step: str = "1m",
        item_type: str | None = None,
        project: str | None = None,
    ) -> Json:
        """Counts and waits per step of the window, and each lane's queue now."""
        from wq.client.schemas import StatsPublic

        return self.request(
            "GET",
            "/api/stats",
            params={"window": window, "step": step, "type": item_type, "project": project},
            shape=StatsPublic,
        )

    def item(self, item_id: str) -> Json:
        """One work item with details and dimensions."""
        from wq.client.schemas import WorkItemPublic

        return self.request(
            "GET", f"/api/work-items/{quote(item_id, safe='')}", shape=WorkItemPublic
        )

    def items_page(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> Json:
        """One page of the item list (`type`, `phase`, `project`, `admission` filters)."""
        from wq.client.schemas import WorkItemPage

        return self.request(
            "GET",
            "/api/work-items",
            params={**filters, "limit": limit, "cursor": cursor},
            shape=WorkItemPage,
        )

    def iter_items(
        self, *, limit: int | None = 100, page_size: int = MAX_PAGE, **filters: Any
    ) -> Iterator[Json]:
        """Items newest first, following the cursor until `limit` items (None: all)."""
        cursor: str | None = None
        remaining = limit
        while remaining is None or remaining > 0:
            size = page_size if remaining is None else min(remaining, page_size)
            page = self.items_page(limit=size, cursor=cursor, **filters)
            yield from page["items"]
            if remaining is not None:
                remaining -= len(page["items"])
            cursor = page.get("next_cursor")
            if not cursor or not page["items"]:
                return

    def history(self, item_id: str, *, limit: int = 50, cursor: str | None = None) -> Json:
        """One page of an item's audit entries, newest first (`entries`, `next_cursor`)."""
        from wq.client.schemas import HistoryPage

        return self.request(
            "GET",
            f"/api/work-items/{quote(item_id, safe='')}/history",
            params={"limit": limit, "cursor": cursor},
            shape=HistoryPage,
        )

    def pending_events(self, item_id: str, *, limit: int = 50, cursor: str | None = None) -> Json:
        """One page of an item's unapplied events, next applied first (`events`, `next_cursor`)."""
        from wq.client.schemas import PendingEventPage

        return self.request(
            "GET",
            f"/api/work-items/{quote(item_id, safe='')}/pending-events",
            params={"limit": limit, "cursor": cursor},
            shape=PendingEventPage,
        )

    def retry(self, item_id: str) -> Json:
        """Bring a failed or cancelled item back to active.

        The answer is the item, or only its `id` and `phase` for a caller without `read`
        on its type.
        """
        from wq.client.schemas import Retried

        return self.request(
            "POST", f"/api/work-items/{quote(item_id, safe='')}/retry", shape=Retried
        )

    def cancel(self, item_id: str) -> Json:
        """Cancel an active item: `{"action": "cancelled"|"requested", "item": {...}}`."""
        from wq.client.schemas import CancelPublic

        return self.request(
            "POST", f"/api/work-items/{quote(item_id, safe='')}/cancel", shape=CancelPublic
        )

    def logs(self, item_id: str, *, tail: int | None = None, follow: bool = False) -> Iterator[str]:
        """A task's output as the server sends it; with `follow`, until the run ends
        (no read timeout then: a run may be silent for long)."""
        path = f"/api/work-items/{item_id}/logs"
        params = {"tail": tail, "follow": "true" if follow else None}
        params = {key: value for key, value in params.items() if value is not None}
        timeout = httpx.Timeout(self.timeout, connect=min(self.timeout, CONNECT_TIMEOUT))
        if follow:
            timeout = httpx.Timeout(self.timeout, connect=timeout.connect, read=None)
        token = self.credentials.current()
        for attempt in range(2):
            with (
                self._transport_errors("GET", path),
                self._http.stream(
                    "GET", path, params=params, headers=bearer_header(token), timeout=timeout
                ) as response,
            ):
                if response.status_code == 401 and token is not None and attempt == 0:
                    replacement = self.credentials.rejected(token)
                    if replacement is not None:
                        token = replacement
                        continue
                if not response.is_success:
                    response.read()
                    self._parse(response, f"GET {path}", token)
                yield from response.iter_text()
                return

    def submit(self, item_type: str, payload: Json) -> Json:
        """Submit an item of a type: `{"action": ..., "item": {...}}`."""
        from wq.client.schemas import SubmissionPublic

        return self.request(
            "POST",
            f"/api/work-items/{quote(item_type, safe='')}",
            json=payload,
            shape=SubmissionPublic,
        )

    def submission_types(self) -> list[Json]:
        """The types the server accepts submissions for, from its OpenAPI document."""
        from wq.client.schemas import OpenApiPaths

        document = self.request("GET", "/openapi.json", auth=False, shape=OpenApiPaths)
        found = []
        for path, operations in sorted(document["paths"].items()):
            match = SUBMIT_PATH.match(path)
            post = operations.get("post")
            # Other POSTs under /api/work-items/ (the bulk retry and cancel) are not types.
            if match and isinstance(post, dict) and "submissions" in (post.get("tags") or []):
                summary = post.get("summary")
                found.append(
                    {
                        "type": match.group(1),
                        "path": path,
                        "summary": summary if isinstance(summary, str) else "",
                    }
                )
        return found

    def task_kinds(self) -> list[str]:
        """The task kinds the server runs (the enum of its `TaskCreate` schema): empty
        when it runs no tasks."""
        from wq.client.schemas import OpenApiPaths

        document = self.request("GET", "/openapi.json", auth=False, shape=OpenApiPaths)
        schemas = (document.get("components") or {}).get("schemas") or {}
        kind = ((schemas.get("TaskCreate") or {}).get("properties") or {}).get("kind") or {}
        kinds = kind.get("enum") if isinstance(kind, dict) else None
        return [str(name) for name in kinds] if isinstance(kinds, list) else []

    def queue_position(self, entry: Json) -> Json | None:
        """The queue entry of a queued item (position in its lane), or None."""
        if entry.get("admission") != "queued":
            return None
        for queued in self.queue(entry["project"], lane=entry.get("lane"), limit=MAX_QUEUE):
            if queued.get("id") == entry.get("id"):
                result: Json = queued
                return result
        return None
