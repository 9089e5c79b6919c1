"""The daemon's HTTP/1.1 protocol: uvicorn's httptools parser with a bound on a request's head.

httptools (llhttp, in C) parses a request for less CPU than h11, but uvicorn puts no
limit on what it buffers before the head of a request ends: a client sending headers
without end would grow the daemon's memory until it dies. So the bytes of each head
(request line and headers) are counted as they arrive, and past `HEAD_LIMIT` the
connection is answered 431 and closed. Heads below it but above
`wq.daemon.body.MAX_HEADER_BYTES` reach the app, which answers 431 with its own error
document. Nor does uvicorn bound the time a head takes (its keep-alive timeout starts
only after a response): a connection that sends nothing, or half a head, would be held
for ever. So a head must end within `server.head_timeout_seconds` of its first byte
(of the connection, for the first), else it is answered 408 and the connection closed.
A request the parser cannot read (an unknown method, a malformed line) is answered 400
with a JSON error document like every other refusal, not uvicorn's plain text.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Well above MAX_HEADER_BYTES (the app's own 431), so that this bound only ever meets
# clients that would otherwise never stop sending.
HEAD_LIMIT = 1024 * 1024


def _refusal(status: str, error: str) -> bytes:
    body = json.dumps({"error": error}).encode()
    head = (
        f"HTTP/1.1 {status}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


_TOO_LONG = _refusal(
    "431 Request Header Fields Too Large", f"the request head exceeds {HEAD_LIMIT} bytes"
)
_UNREADABLE = _refusal(
    "400 Bad Request",
    "not a valid HTTP/1.1 request: its request line or headers could not be read",
)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head longer than `HEAD_LIMIT` or
    slower than `head_timeout` seconds (`bounded_protocol` sets it from the config)."""

    head_timeout = 30.0
    # Bytes received since the current request's head began; None while its body is read.
    _head_bytes: int | None = 0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A new connection: its first head is timed from now."""
        super().connection_made(transport)
        self._time_head()

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone: so is its head's timer."""
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Count the bytes of an unfinished head before the parser buffers them."""
        if self._head_bytes is not None:
            if self._head_timer is None:
                self._time_head()  # the next request's head begins
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_LIMIT:
                self._refuse(_TOO_LONG)
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        """The head has ended: its body is bounded by `wq.daemon.body.BodyGuard`."""
        self._head_bytes = None
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The request has ended: what follows on the connection is the next head."""
        self._head_bytes = 0
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """A request the parser refused: answered as JSON, then closed (uvicorn logs it)."""
        self._refuse(_UNREADABLE)

    def _time_head(self) -> None:
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._head_bytes is not None:
            error = (
                f"the request head did not arrive within {self.head_timeout:g}s"
                " (server.head_timeout_seconds)"
            )
            self._refuse(_refusal("408 Request Timeout", error))

    def _refuse(self, answer: bytes) -> None:
        """Answer `answer` and close, reading nothing more."""
        self._head_bytes = None
        self._stop_head_timer()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()


def bounded_protocol(head_timeout_seconds: float) -> type[BoundedHttpToolsProtocol]:
    """The protocol class uvicorn makes each connection's protocol of, with this timeout."""
    return type(
        "BoundedHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {"head_timeout": head_timeout_seconds},
    )
