"""A fake OAuth proxy with Kerberos (SPNEGO) login, in front of a wq daemon on loopback.

It plays the OpenShift oauth-proxy the `wq login` flow talks to:

- `GET /oauth/start` redirects to `/oauth/authorize`, which answers
  `401 WWW-Authenticate: Negotiate` until the client sends a Kerberos token. The token is
  accepted with `gssapi` against the proxy's keytab (a real MIT KDC issued the ticket);
  on success the proxy opens a session (`Set-Cookie: _oauth_proxy=...; HttpOnly`), sends
  its own token back for mutual authentication and redirects to `/oauth/callback`.
- `POST /oauth/token` with a valid session cookie is forwarded to the daemon with
  `X-Forwarded-Access-Token` set to a token minted for the session's principal (the
  test mints OpenShift tokens the daemon checks against the fake OpenShift API), so
  the daemon's own `/oauth/token` answers, as behind the real proxy.
- Every other path is passed to the daemon unchanged (the proxy never adds identity
  headers there).

Faults: `refuse_spnego` (answer every Kerberos token with 401 and no new challenge),
`reject_sessions` (forget every session, so `/oauth/token` is refused). It is strict:
only `Negotiate` is offered, a failed or incomplete context is a 401, and a session is
usable only by its cookie.
"""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import gssapi
import httpx

COOKIE = "_oauth_proxy"
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "host",
    "content-length",
}

Mint = Callable[[str], str]
"""Turns a Kerberos principal (`user@REALM`) into an access token the daemon accepts."""


@dataclass
class SpnegoProxy:
    """See the module docstring. Use as a context manager; `url` is its address."""

    upstream: str
    mint: Mint
    acceptor: Any = None  # gssapi.Credentials(usage="accept"); None: the default keytab
    refuse_spnego: bool = False
    reject_sessions: bool = False
    sessions: dict[str, str] = field(default_factory=dict)  # cookie -> principal
    principals: list[str] = field(default_factory=list)  # every accepted login
    log: list[tuple[str, str, int]] = field(default_factory=list)  # method, path, status
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> SpnegoProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def accept(self, token: bytes) -> tuple[str, bytes | None] | None:
        """Accept a client's Kerberos token: (principal, answer token) or None."""
        if self.refuse_spnego:
            return None
        try:
            context = gssapi.SecurityContext(usage="accept", creds=self.acceptor)
            answer = context.step(token)
        except gssapi.exceptions.GSSError:
            return None
        if not context.complete:
            return None  # Kerberos completes in one step; anything else is refused
        return str(context.initiator_name), answer

    def open_session(self, principal: str) -> str:
        cookie = secrets.token_urlsafe(24)
        with self._lock:
            self.sessions[cookie] = principal
            self.principals.append(principal)
        return cookie

    def principal_of(self, cookie_header: str | None) -> str | None:
        if self.reject_sessions or not cookie_header:
            return None
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                with self._lock:
                    return self.sessions.get(value)
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: SpnegoProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.owner.log.append((self.command, self.path, status))
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/oauth/start":
            self._reply(302, headers={"Location": "/oauth/authorize?client_id=wq"})
        elif path == "/oauth/authorize":
            self._authorize()
        elif path == "/oauth/callback":
            self._reply(200, b"signed in\n", {"Content-Type": "text/plain"})
        else:
            self._forward()

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] == "/oauth/token":
            self._token()
        else:
            self._forward()

    def _authorize(self) -> None:
        header = self.headers.get("Authorization", "")
        challenge = {"WWW-Authenticate": "Negotiate", "Content-Type": "text/plain"}
        if not header.startswith("Negotiate "):
            self._reply(401, b"Kerberos login required\n", challenge)
            return
        try:
            token = base64.b64decode(header[len("Negotiate ") :], validate=True)
        except ValueError:
            self._reply(400, b"malformed Negotiate token\n", {"Content-Type": "text/plain"})
            return
        accepted = self.owner.accept(token)
        if accepted is None:
            self._reply(401, b"Kerberos login refused\n", {"Content-Type": "text/plain"})
            return
        principal, answer = accepted
        cookie = self.owner.open_session(principal)
        headers = {
            "Location": "/oauth/callback?code=ok",
            "Set-Cookie": f"{COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Lax",
        }
        if answer:
            headers["WWW-Authenticate"] = "Negotiate " + base64.b64encode(answer).decode()
        self._reply(302, headers=headers)

    def _token(self) -> None:
        body = self._body()
        principal = self.owner.principal_of(self.headers.get("Cookie"))
        if principal is None:
            # The real proxy sends a caller without a session to its sign-in page.
            self._reply(302, headers={"Location": "/oauth/start"})
            return
        minted = self.owner.mint(principal)
        self._forward(body, extra={"X-Forwarded-Access-Token": minted})

    def _forward(self, body: bytes | None = None, extra: dict[str, str] | None = None) -> None:
        headers = {
            name: value
            for name, value in self.headers.items()
            if name.lower() not in HOP_BY_HOP and not name.lower().startswith("x-forwarded-")
        }
        headers.update(extra or {})
        try:
            response = httpx.request(
                self.command,
                self.owner.upstream + self.path,
                headers=headers,
                content=self._body() if body is None else body,
                timeout=30.0,
            )
        except httpx.TransportError as err:
            self._reply(502, f"upstream: {err}\n".encode(), {"Content-Type": "text/plain"})
            return
        passed = {
            name: value
            for name, value in response.headers.items()
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-encoding"
        }
        self._reply(response.status_code, response.content, passed)
