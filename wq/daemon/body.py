"""Request bodies on /api/: authenticated before they are read, bounded while read.

FastAPI reads and parses a request's body before it runs any dependency, so an
unauthenticated caller could make the daemon buffer and parse any amount of data.
`BodyGuard` runs first: it authenticates the caller from the headers alone (the
principal is kept for the route's own dependency), answers a refusal without reading
a byte of the body, refuses a body that is not JSON (415), and reads the body itself
up to the configured limit (413 as soon as the limit is passed, whatever
`Content-Length` claimed) and within the configured time (408 once it is over: a
client that sends its body slowly, or stops half way, would otherwise hold one of the
requests the daemon lets in, `wq.daemon.shedding`, for as long as it liked), then
refuses a body that is not JSON (400) or a field that could not be stored and written
back (422, wq.daemon.documents). The route then gets the buffered body, and the
document parsed from it: a `ParsedBodyRoute` hands FastAPI that document instead of
parsing the body again. A body larger than `INLINE_CHECK_BYTES` is judged on a thread
of its own, one at a time: parsing megabytes takes seconds, and on the event loop it
would hold every other request and the probes (a liveness probe would fail and have
the daemon restarted). One caller sends at most its share of bodies at once
(`wq.daemon.shedding.CallerShare`, 429 beyond), so that a caller sending slowly cannot
hold every request the daemon lets in.

A webhook checks its own secret from the headers, then reads the body itself and
judges it (its sender's documents are not ours to limit per field, and a caller without
the secret learns nothing about them): the route gets a `receive` bounded by the same
limit and time (413, 408), so that a caller without the secret makes the daemon read
nothing of what it sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.to_thread
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wq.daemon.auth import Refusal, authenticate_request, authenticated_at_once
from wq.daemon.contract import ErrorBody
from wq.daemon.documents import DocumentRefused, NotJson, check_body
from wq.daemon.shedding import CallerShare
from wq.engine.envelope import UndecodableMessage, contains_nul, may_spell_nul, parse_json

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
WEBHOOK_PREFIX = "/api/webhooks/"
# Headers beyond this are refused with 431 (a head beyond wq.daemon.http_protocol's
# own bound never reaches the app).
MAX_HEADER_BYTES = 256 * 1024
# Bodies up to this size are judged on the event loop (a few milliseconds at most;
# every submission the CLI sends is far smaller), larger ones on a thread.
INLINE_CHECK_BYTES = 16 * 1024
# Where the guard leaves the body's parsed document for the route (the ASGI scope).
PARSED_BODY = "wq.parsed_body"


def _is_api(path: str) -> bool:
    return path.startswith("/api/")


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _not_plain_utf8(headers: Headers) -> str | None:
    """Why a JSON body would be misread (it is read as UTF-8 bytes, as they come), or
    None: a compressed body, or a charset other than UTF-8 said for it."""
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        return f"the body must be sent uncompressed: Content-Encoding {encoding} is not read"
    for parameter in headers.get("content-type", "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            return f"the body must be UTF-8 JSON, not charset={charset}"
    return None


CLOSE = {"Connection": "close"}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=CLOSE)


class BodyGuard:
    """ASGI middleware: authenticate, check the media type, then read a bounded body."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_document_depth: int = 32,
        max_document_bytes: int = 256 * 1024,
        body_timeout_seconds: float = 30.0,
        self_bounded: dict[str, frozenset[str]] | None = None,
        bodies_per_caller: int = 10,
    ) -> None:
        self.app = app
        self.limit = max_body_bytes
        self.body_timeout = body_timeout_seconds
        self.max_depth = max_document_depth
        self.max_document = max_document_bytes
        # Per path: the body fields its route bounds itself (`Submission.self_bounded`).
        self.self_bounded = self_bounded or {}
        self.share = CallerShare(bodies_per_caller)
        # One large body judged at a time: each holds its parsed document in memory.
        # A limiter belongs to its event loop: made on the first large body a loop serves.
        self._large_bodies: tuple[asyncio.AbstractEventLoop, anyio.CapacityLimiter] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if sum(len(name) + len(value) for name, value in scope["headers"]) > MAX_HEADER_BYTES:
            response: Response = _error(431, f"the request headers exceed {MAX_HEADER_BYTES} bytes")
            await response(scope, receive, send)
            return
        path = scope.get("path", "")
        if scope["method"] not in BODY_METHODS or not _is_api(path):
            await self.app(scope, receive, send)
            return
        caller = await self._authenticate(scope, path)
        if isinstance(caller, Response):
            await caller(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        has_body = (declared not in (None, "0")) or "chunked" in headers.get(
            "transfer-encoding", ""
        ).lower()
        if (
            has_body
            and not path.startswith(WEBHOOK_PREFIX)
            and not _is_json(headers.get("content-type"))
        ):
            media = headers.get("content-type")
            said = f"not {media}" if media else "and no Content-Type was sent"
            await _error(415, f"the body must be application/json, {said}")(scope, receive, send)
            return
        unreadable = has_body and not path.startswith(WEBHOOK_PREFIX) and _not_plain_utf8(headers)
        if unreadable:
            await _error(415, unreadable)(scope, receive, send)
            return
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large()(scope, receive, send)
            return
        if path.startswith(WEBHOOK_PREFIX):
            # Read by the route once it has checked the sender's secret.
            await self.app(scope, self._bounded(receive), send)
            return
        assert caller is not None  # only a webhook's caller is not known yet
        if not self.share.enter(caller):
            await self._over_share()(scope, receive, send)
            return
        try:
            with anyio.fail_after(self.body_timeout):
                body = await self._read(receive)
        except TimeoutError:
            await _error(408, self._too_slow_message())(scope, receive, send)
            return
        finally:
            self.share.leave(caller)
        if body is None:
            await self._too_large()(scope, receive, send)
            return
        exempt = self.self_bounded.get(path, frozenset())
        if len(body) <= INLINE_CHECK_BYTES:
            judged = self._check_documents(body, exempt)
        else:
            judged = await anyio.to_thread.run_sync(
                self._check_documents, body, exempt, limiter=self._large_body_limiter()
            )
        if isinstance(judged, Response):
            await judged(scope, receive, send)
            return
        if body:
            scope[PARSED_BODY] = judged
        await self.app(scope, _replay(body, receive), send)

    async def _authenticate(self, scope: Scope, path: str) -> tuple[str, str] | Response | None:
        """The caller (its tier and identity) once authenticated, or the refusal; None
        for a path with its own check."""
        if path.startswith(WEBHOOK_PREFIX):
            return None
        request = Request(scope)
        try:
            principal = authenticated_at_once(request)
            if principal is None:
                principal = await run_in_threadpool(authenticate_request, request)
            return principal.tier, principal.identity
        except Refusal as refusal:
            # The app's own handler answers and audits it, as for any refusal.
            handler = request.app.exception_handlers[Refusal]
            response: Response = await handler(request, refusal)
            return response

    def _large_body_limiter(self) -> anyio.CapacityLimiter:
        loop = asyncio.get_running_loop()
        if self._large_bodies is None or self._large_bodies[0] is not loop:
            self._large_bodies = (loop, anyio.CapacityLimiter(1))
        return self._large_bodies[1]

    def _check_documents(self, body: bytes, self_bounded: frozenset[str]) -> Any:
        """The body's document; or the answer: 400 for a body that is not JSON, 422 for a
        field that could not be kept."""
        if not body:
            return None
        try:
            return check_body(
                body,
                max_depth=self.max_depth,
                max_bytes=self.max_document,
                self_bounded=self_bounded,
            )
        except NotJson as error:
            return _error(400, str(error))
        except DocumentRefused as error:
            return JSONResponse(
                ErrorBody(error=str(error), problems=[str(error)]).model_dump(),
                status_code=422,
            )

    def _over_share(self) -> Response:
        response = _error(
            429,
            f"this caller is already sending {self.share.limit} request bodies: send the"
            " next once one has arrived (a quarter of server.request_threads +"
            " server.max_waiting_requests)",
        )
        response.headers["Retry-After"] = "1"
        return response

    def _too_large(self) -> Response:
        return _error(413, self._too_large_message())

    def _too_large_message(self) -> str:
        return f"the request body exceeds the limit of {self.limit} bytes (server.max_body_bytes)"

    def _too_slow_message(self) -> str:
        return (
            f"the request body did not arrive within {self.body_timeout:g}s"
            " (server.body_timeout_seconds)"
        )

    def _bounded(self, receive: Receive) -> Receive:
        """`receive` for a route that reads the body itself: 413 once the body passes
        the limit, 408 once it has taken longer than the time allowed (counted from the
        first read), each closing the connection (the rest of the body is not read)."""
        size = 0
        deadline: float | None = None

        async def bounded() -> Message:
            nonlocal size, deadline
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + self.body_timeout
            try:
                # asyncio's own timeout: anyio's cancel scope cost a webhook ~20 us.
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, self._too_slow_message(), headers=CLOSE) from None
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > self.limit:
                    raise HTTPException(413, self._too_large_message(), headers=CLOSE)
            return message

        return bounded

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the route sees what arrived
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _webhook_document(body: bytes) -> Any:
    try:
        document = parse_json(body)
    except UndecodableMessage as err:
        raise HTTPException(400, f"the body is not usable JSON: {err}") from None
    if may_spell_nul(body) and contains_nul(document):
        raise HTTPException(400, "the payload contains NUL characters")
    return document


async def webhook_document(body: bytes) -> Any:
    """A webhook body's JSON document; 400 for one that is not JSON or that holds NUL
    (no database stores it). A large body is parsed on a thread: a 15 MB pipeline event
    held the event loop, and with it every request and probe, for over a second."""
    if len(body) <= INLINE_CHECK_BYTES:
        return _webhook_document(body)
    return await anyio.to_thread.run_sync(_webhook_document, body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the buffered body over once, then waits as usual."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class ParsedBodyRequest(Request):
    """A request whose JSON document `BodyGuard` has parsed already: not parsed again."""

    async def json(self) -> Any:
        """The guard's document, else the body parsed here (a body the guard let by)."""
        if PARSED_BODY in self.scope:
            return self.scope[PARSED_BODY]
        return await super().json()


class ParsedBodyRoute(APIRoute):
    """A route whose JSON body FastAPI takes from `BodyGuard`'s document (parsed once,
    and a large one off the event loop) instead of parsing it again on the loop."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_parsed_body(request: Request) -> Response:
            return await handler(ParsedBodyRequest(request.scope, request.receive, request._send))

        return with_parsed_body
