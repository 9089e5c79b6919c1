"""Another service where a wq server should be: every path answers 200 with one body.

`wq --url` pointed at the wrong place (another API, a proxy's HTML page, a broken
server) must say so in one line; the CLI and TUI tests point their client at this.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.loopback import Answer, LoopbackListener

# What such a server may answer: JSON of another shape, or a web page.
ANSWERS: dict[str, tuple[str, bytes]] = {
    "object": ("application/json", b'{"foo": 1}'),
    "list": ("application/json", b'[1, "two"]'),
    "list-of-objects": ("application/json", b'[{"foo": 1}]'),
    "null": ("application/json", b"null"),
    "text": ("application/json", b'"hello"'),
    "empty": ("application/json", b""),
    "html": ("text/html; charset=utf-8", b"<!doctype html><title>Welcome</title><p>Hi</p>"),
}


class ForeignServer:
    """A loopback HTTP server answering every request with `ANSWERS[kind]` (or `document`)."""

    def __init__(
        self, kind: str = "object", document: Any = None, redirect: str | None = None
    ) -> None:
        self.kind = kind
        self.document = document
        self.redirect = redirect  # answer 307 to this Location instead (a proxy, a site)
        self.paths: list[str] = []
        self._listener = LoopbackListener(self._serve, name="foreign")

    def _serve(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        self.paths.append(f"{method} {target}")
        if self.redirect is not None:
            return 307, {"Location": self.redirect}, b""
        if self.document is not None:
            return 200, {"Content-Type": "application/json"}, json.dumps(self.document).encode()
        content_type, data = ANSWERS[self.kind]
        return 200, {"Content-Type": content_type}, data

    @property
    def url(self) -> str:
        """Its base URL."""
        return self._listener.url()

    def __enter__(self) -> ForeignServer:
        self._listener.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.stop()
