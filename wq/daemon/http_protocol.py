"""The daemon's HTTP/1.1 protocol: uvicorn's httptools parser with a bound on a request's head.

httptools (llhttp, in C) parses a request for less CPU than h11, but uvicorn puts no
limit on what it buffers before the head of a request ends: a client sending headers
without end would grow the daemon's memory until it dies. So the bytes of each head
(request line and headers) are counted as they arrive, and past `HEAD_LIMIT` the
connection is answered 431 and closed. Heads below it but above
`wq.daemon.body.MAX_HEADER_BYTES` reach the app, which answers 431 with its own error
document.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Well above MAX_HEADER_BYTES (the app's own 431), so that this bound only ever meets
# clients that would otherwise never stop sending.
HEAD_LIMIT = 1024 * 1024


def _refusal() -> bytes:
    body = json.dumps({"error": f"the request head exceeds {HEAD_LIMIT} bytes"}).encode()
    head = (
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


_REFUSAL = _refusal()


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head longer than `HEAD_LIMIT`."""

    # Bytes received since the current request's head began; None while its body is read.
    _head_bytes: int | None = 0

    def data_received(self, data: bytes) -> None:
        """Count the bytes of an unfinished head before the parser buffers them."""
        if self._head_bytes is not None:
            self._head_bytes += len(data)
            if self._head_bytes > HEAD_LIMIT:
                self._head_bytes = None
                if self.transport is not None and not self.transport.is_closing():
                    self.transport.write(_REFUSAL)
                    self.transport.close()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        """The head has ended: its body is bounded by `wq.daemon.body.BodyGuard`."""
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The request has ended: what follows on the connection is the next head."""
        self._head_bytes = 0
        super().on_message_complete()
