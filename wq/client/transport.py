"""How `ApiClient` talks to the daemon: requests, credentials, and every failure in words.

A request carries the caller's token (`wq.client.credentials`), is sent again with a
replacement when the server rejects a cached one, and a GET is sent again after a
short wait when a busy server sheds it. What comes back is the server's JSON document,
checked against its shape (`wq.client.schemas`) when the caller names one; anything
else becomes a typed `ClientError` whose message is one readable line: an unreachable
server, a timeout, a redirect or an answer that is not JSON (the wrong server), or the
API's own error document.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self

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


def bearer_header(token: Token | None) -> dict[str, str]:
    """The `Authorization` header that carries `token` (none without one)."""
    return {"Authorization": f"Bearer {token.value}"} if token is not None else {}


# Statuses another web server gives a path or method it has not: with a body that is
# not JSON, the URL names something other than a wq server.
_NOT_OURS = (404, 405, 501)


def _media_type(response: httpx.Response) -> str:
    """The answer's media type, as the server named it (`text/html`), for an error line."""
    media = response.headers.get("Content-Type", "").split(";")[0].strip()
    return media[:40] or "no media type"


class ApiTransport:
    """Requests to one wq daemon, their credentials and their failures (`ApiClient`'s base)."""

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

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

    def accepts(self, token: str) -> bool:
        """Whether the server takes this cached token (`/api/whoami` not 401), asked once:
        no login, no retry. `ServerUnreachable` if it cannot be asked."""
        response = self._send("GET", "/api/whoami", {}, None, Token(token, "cache"))
        return response.status_code != 401

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
                method, path, params=params, json=json, headers=bearer_header(token)
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
        except httpx.TimeoutException as err:
            # A change sent and not answered may have been made all the same.
            sent = not isinstance(err, httpx.ConnectTimeout | httpx.PoolTimeout)
            raise ServerUnreachable(
                f"{self.url} did not answer {method} {path} within {self.timeout:g}s",
                hint=(
                    "it may have been done all the same: look (wq status) before trying again"
                    if sent and method not in ("GET", "HEAD")
                    else None
                ),
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
        if body is None and response.content and response.status_code in _NOT_OURS:
            # wq answers every such refusal with its JSON error: a web server's page
            # (`python3 -m http.server`, a proxy's) says the URL is not the API's.
            raise ServerError(
                f"not a wq API at this URL: {self.url} answered {what} with "
                f"HTTP {response.status_code} ({_media_type(response)}), not wq's JSON error",
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
                f"{self.url} rejected the token in {token.variable}: {error.message}",
                hint=f"renew it or unset {token.variable} to use `wq login`",
                status=401,
            )
        return AuthenticationRequired(
            f"{self.url} rejected your login: {error.message}",
            hint="run `kinit` and `wq login`, or set WQ_TOKEN",
            status=401,
        )
