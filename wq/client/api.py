"""`ApiClient`: the one HTTP client of the CLI and the TUI.

It returns the server's JSON documents unchanged (dicts and lists), so `-o json` prints
exactly what the API said, and it turns every failure into a typed `ClientError`
whose message is one readable line. Thread-safe: the TUI shares one instance between
its worker threads (`@work(thread=True)`); httpx's client and `Credentials` both are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

import wq
from wq.client.credentials import Credentials, Token
from wq.client.errors import (
    AuthenticationRequired,
    ClientError,
    ServerError,
    ServerUnreachable,
    error_for_status,
)
from wq.client.settings import resolve_url

DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0
MAX_PAGE = 500  # the API's largest page
MAX_QUEUE = 1000  # the API's largest queue listing
SUBMIT_PATH = re.compile(r"^/api/work-items/([a-z][a-z0-9_-]*)$")

Json = Any


class ApiClient:
    """Talks to one wq daemon; see the module docstring."""

    def __init__(
        self,
        url: str | None = None,
        *,
        no_auth: bool = False,
        credentials: Credentials | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.credentials = credentials or Credentials(self.url, no_auth=no_auth)
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            headers={"User-Agent": f"wq/{wq.__version__}", "Accept": "application/json"},
            transport=transport,
        )

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Json = None,
        auth: bool = True,
    ) -> Json:
        """Send one request and return its JSON body, or raise a `ClientError`.

        A 401 to a cached token is retried once with its replacement (see `Credentials`);
        the server authenticates before it reads a body, so a retried POST is safe.
        """
        params = {key: value for key, value in (params or {}).items() if value is not None}
        token = self.credentials.current() if auth else None
        response = self._send(method, path, params, json, token)
        if response.status_code == 401 and token is not None:
            replacement = self.credentials.rejected(token)
            if replacement is not None:
                token = replacement
                response = self._send(method, path, params, json, token)
                if response.status_code == 401:
                    self.credentials.discard(token)
        return self._parse(response, f"{method} {path}", token)

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any],
        json: Json,
        token: Token | None,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token.value}"} if token is not None else {}
        try:
            return self._http.request(method, path, params=params, json=json, headers=headers)
        except httpx.ConnectError as err:
            reason = "connection refused" if "refused" in str(err).lower() else str(err)
            raise ServerUnreachable(
                f"cannot connect to {self.url}: {reason}",
                hint="is `wq daemon` running? Pass --url or set WQ_URL for another server",
            ) from None
        except httpx.TimeoutException:
            raise ServerUnreachable(
                f"{self.url} did not answer {method} {path} within {self.timeout:g}s"
            ) from None
        except httpx.TransportError as err:
            raise ServerUnreachable(f"cannot reach {self.url}: {err}") from None

    def _parse(self, response: httpx.Response, what: str, token: Token | None) -> Json:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
            if response.is_success:
                raise ServerError(
                    f"{self.url} answered {what} with something that is not JSON "
                    "(is this a wq server?)"
                ) from None
        if response.is_success:
            return body
        error = error_for_status(
            response.status_code,
            body,
            what=what,
            retry_after=response.headers.get("Retry-After"),
        )
        if response.status_code == 401:
            raise self._unauthenticated(error, token)
        raise error

    def _unauthenticated(self, error: ClientError, token: Token | None) -> ClientError:
        if token is None:
            return AuthenticationRequired(
                f"{self.url} requires authentication: {error.message}",
                hint="drop --no-auth to send your credentials",
                status=401,
            )
        if token.source == "env":
            return AuthenticationRequired(
                f"{self.url} rejected the token in {token.variable}",
                hint=f"renew it or unset {token.variable} to use `wq login`",
                status=401,
            )
        return AuthenticationRequired(
            f"{self.url} rejected your login: {error.message}",
            hint="run `kinit` and `wq login`, or set WQ_TOKEN",
            status=401,
        )

    # ------------------------------------------------------------------ endpoints

    def health(self) -> Json:
        """`/healthz` (no credentials)."""
        return self.request("GET", "/healthz", auth=False)

    def whoami(self) -> Json:
        """The caller's identity and permissions, as the server documents them."""
        return self.request("GET", "/api/whoami")

    def pools(self) -> list[Json]:
        """Every project with queued or in-flight work and its pool usage."""
        result: list[Json] = self.request("GET", "/api/pools")
        return result

    def pool(self, project: str) -> Json:
        """One project's pool."""
        # Dots escaped too: a `..` segment would otherwise be resolved by the URL and
        # ask for another endpoint (`../work-items`), not for that project.
        path = quote(project, safe="/").replace(".", "%2E")
        return self.request("GET", f"/api/pools/{path}")

    def queue(self, project: str, *, lane: str | None = None, limit: int = 100) -> list[Json]:
        """A project's queued items in admission order."""
        result: list[Json] = self.request(
            "GET", "/api/queue", params={"project": project, "lane": lane, "limit": limit}
        )
        return result

    def queue_page(
        self, project: str, lane: str, *, limit: int = 100, cursor: str | None = None
    ) -> Json:
        """One page of a lane's queue with true positions (`entries`, `next_cursor`)."""
        return self.request(
            "GET",
            f"/api/queue/{quote(lane, safe='')}",
            params={"project": project, "limit": limit, "cursor": cursor},
        )

    def item(self, item_id: str) -> Json:
        """One work item with details and dimensions."""
        return self.request("GET", f"/api/work-items/{quote(item_id, safe='')}")

    def items_page(self, *, limit: int = 50, cursor: str | None = None, **filters: Any) -> Json:
        """One page of the item list (`type`, `phase`, `project`, `admission` filters)."""
        return self.request(
            "GET", "/api/work-items", params={**filters, "limit": limit, "cursor": cursor}
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
        return self.request(
            "GET",
            f"/api/work-items/{quote(item_id, safe='')}/history",
            params={"limit": limit, "cursor": cursor},
        )

    def pending_events(self, item_id: str, *, limit: int = 50, cursor: str | None = None) -> Json:
        """One page of an item's unapplied events, next applied first (`events`, `next_cursor`)."""
        return self.request(
            "GET",
            f"/api/work-items/{quote(item_id, safe='')}/pending-events",
            params={"limit": limit, "cursor": cursor},
        )

    def retry(self, item_id: str) -> Json:
        """Bring a failed or cancelled item back to active."""
        return self.request("POST", f"/api/work-items/{quote(item_id, safe='')}/retry")

    def cancel(self, item_id: str) -> Json:
        """Cancel an active item: `{"action": "cancelled"|"requested", "item": {...}}`."""
        return self.request("POST", f"/api/work-items/{quote(item_id, safe='')}/cancel")

    def submit(self, item_type: str, payload: Json) -> Json:
        """Submit an item of a type: `{"action": ..., "item": {...}}`."""
        return self.request("POST", f"/api/work-items/{quote(item_type, safe='')}", json=payload)

    def submission_types(self) -> list[Json]:
        """The types the server accepts submissions for, from its OpenAPI document."""
        document = self.request("GET", "/openapi.json", auth=False)
        found = []
        for path, operations in sorted((document or {}).get("paths", {}).items()):
            match = SUBMIT_PATH.match(path)
            post = operations.get("post") if isinstance(operations, dict) else None
            if match and post:
                found.append(
                    {"type": match.group(1), "path": path, "summary": post.get("summary", "")}
                )
        return found

    def queue_position(self, entry: Json) -> Json | None:
        """The queue entry of a queued item (position in its lane), or None."""
        if entry.get("admission") != "queued":
            return None
        for queued in self.queue(entry["project"], lane=entry.get("lane"), limit=MAX_QUEUE):
            if queued.get("id") == entry.get("id"):
                result: Json = queued
                return result
        return None
