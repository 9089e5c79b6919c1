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

import contextlib
import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
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

if TYPE_CHECKING:
    from pydantic import BaseModel

DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0
# A GET answered 503 with a Retry-After this short (an overloaded daemon shedding load,
# see wq.daemon.shedding) is sent again, up to this many times; a longer one (a
# database outage) is reported at once.
BUSY_RETRY_AFTER_SECONDS = 2
BUSY_RETRIES = 3
MAX_PAGE = 500  # the API's largest page
MAX_QUEUE = 1000  # the API's largest queue listing
SUBMIT_PATH = re.compile(r"^/api/work-items/([a-z][a-z0-9_-]*)$")

Json = Any


def _busy_wait(response: httpx.Response) -> int | None:
    """Seconds to wait before sending a request again that a busy server refused (503
    with a short `Retry-After`), or None: not refused so, or not worth waiting for."""
    if response.status_code != 503:
        return None
    value = response.headers.get("Retry-After", "")
    if not (value.isascii() and value.isdigit()) or int(value) > BUSY_RETRY_AFTER_SECONDS:
        return None
    return int(value)


def _authorization(token: Token | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token.value}"} if token is not None else {}


def _media_type(response: httpx.Response) -> str:
    """The answer's media type, as the server named it (`text/html`), for an error line."""
    media = response.headers.get("Content-Type", "").split(";")[0].strip()
    return media[:40] or "no media type"


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
        self.credentials = credentials or Credentials(
            self.url, no_auth=no_auth, before_login=self.reachable
        )
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
        shape: type[BaseModel] | None = None,
    ) -> Json:
        """Send one request and return its JSON body, or raise a `ClientError`.

        With `shape`, a successful answer must validate as that model (`wq.client.schemas`),
        else `ServerError`; the document returned is still the server's own.
        A 401 to a cached token is retried once with its replacement (see `Credentials`);
        the server authenticates before it reads a body, so a retried POST is safe. A
        GET refused by a busy server is sent again after the wait it asks for (a few
        times, for a short wait only); other requests are not, lest one be done twice.
        """
        params = {key: value for key, value in (params or {}).items() if value is not None}
        token = self.credentials.current() if auth else None
        response = self._send(method, path, params, json, token)
        for _ in range(BUSY_RETRIES if method == "GET" else 0):
            wait = _busy_wait(response)
            if wait is None:
                break
            time.sleep(wait)
            response = self._send(method, path, params, json, token)
        if response.status_code == 401 and token is not None:
            replacement = self.credentials.rejected(token)
            if replacement is not None:
                token = replacement
                response = self._send(method, path, params, json, token)
                if response.status_code == 401:
                    self.credentials.discard(token)
        body = self._parse(response, f"{method} {path}", token)
        if shape is not None:
            self._check(shape, body, f"{method} {path}")
        return body

    def reachable(self) -> None:
        """Raise `ServerUnreachable` unless the server answers at all (any status)."""
        self._send("GET", "/healthz", {}, None, None)

    def _send(
        self,
        method: str,
        path: str,
        params: dict[str, Any],
        json: Json,
        token: Token | None,
    ) -> httpx.Response:
        with self._transport_errors(method, path):
            return self._http.request(
                method, path, params=params, json=json, headers=_authorization(token)
            )

    @contextlib.contextmanager
    def _transport_errors(self, method: str, path: str) -> Iterator[None]:
        """httpx's failures to reach the server as `ServerUnreachable`, in words."""
        try:
            yield
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
                    f"unexpected answer from {self.url}: {what}: not JSON "
                    f"({_media_type(response)}; is this a wq server?)"
                ) from None
        if response.is_success:
            return body
        if response.is_redirect:
            # The API never redirects: a proxy's login page, a web site or a URL with a
            # wrong path did. Not a failure of the server, the wrong server.
            where = response.headers.get("Location", "")[:200]
            raise ServerError(
                f"not a wq API at this URL: {self.url} answered {what} with a redirect "
                f"({response.status_code}{' to ' + where if where else ''})",
                hint="check --url (or WQ_URL): it names the wq server itself",
                status=response.status_code,
            )
        error = error_for_status(
            response.status_code,
            body,
            what=what,
            retry_after=response.headers.get("Retry-After"),
        )
        if response.status_code == 401:
            raise self._unauthenticated(error, token)
        raise error

    def _check(self, shape: type[BaseModel], body: Json, what: str) -> None:
        # Imported here: pydantic is loaded only once an answer is there to check.
        from pydantic import ValidationError

        from wq.client.schemas import problem

        try:
            shape.model_validate(body)
        except ValidationError as err:
            raise ServerError(
                f"unexpected answer from {self.url}: {what}: {problem(err)} (is this a wq server?)"
            ) from None

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
                    "GET", path, params=params, headers=_authorization(token), timeout=timeout
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

    def queue_position(self, entry: Json) -> Json | None:
        """The queue entry of a queued item (position in its lane), or None."""
        if entry.get("admission") != "queued":
            return None
        for queued in self.queue(entry["project"], lane=entry.get("lane"), limit=MAX_QUEUE):
            if queued.get("id") == entry.get("id"):
                result: Json = queued
                return result
        return None
