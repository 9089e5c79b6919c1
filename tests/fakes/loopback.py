"""A small base for fake services: a real HTTP(S) server on 127.0.0.1, ephemeral port.

`LoopbackListener` is the server thread itself (any handler, HTTP/1.0 or 1.1, start, stop
cutting open connections, restart on the same port); the GitLab fake builds on it directly.
`LoopbackServer` is the simpler base of the JSON fakes (OIDC, OpenShift): subclasses answer
`handle(request)` with `(status, json_body, headers)`. Every request is logged
(`requests`), failures can be injected per path (`fail_next`), a delay added (`delay`)
or every answer held back until the test lets it go (`gate`),
and `tls_dir` serves HTTPS with a fresh CA whose file is `ca_file`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Response = tuple[int, Any, dict[str, str]]


@dataclass
class Request:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def bearer(self) -> str | None:
        value = self.headers.get("authorization", "")
        return value[7:] if value.lower().startswith("bearer ") else None


@dataclass
class TlsFiles:
    """A CA and a server certificate for 127.0.0.1 and localhost signed by it."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_tls(directory: Path) -> TlsFiles:
    """Write a fresh CA and a loopback server certificate into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wq test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    files.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


Answer = tuple[int, dict[str, str], bytes | Iterator[bytes]]
"""What a listener writes back: status, headers (Content-Type included) and body bytes,
or an iterator of them for a body streamed until it ends (then the connection closes)."""

Serve = Callable[[str, str, dict[str, str], bytes], Answer | None]
"""`serve(method, target, headers, body)`: the answer, or None to drop the connection."""


class _ListenerHandler(BaseHTTPRequestHandler):
    server: _ListenerServer

    def setup(self) -> None:
        super().setup()
        # Per connection, so that one listener can speak HTTP/1.1 (keep-alive) and another 1.0.
        self.protocol_version = self.server.listener.protocol
        self.server_version = self.server.listener.server_version
        # Headers and body go out in two writes: without this, Nagle's algorithm and
        # delayed ACKs cost ~40 ms per request on a kept-alive connection.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: fakes keep their own request logs."""

    def _serve(self) -> None:
        listener = self.server.listener
        method = self.command
        if method not in listener.methods:
            self.send_error(501, f"Unsupported method ({method!r})")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            answer = listener.serve(method, self.path, dict(self.headers.items()), body)
        except Exception as err:  # a bug in the fake: answer 500 and keep serving
            data = json.dumps({"message": f"500 Internal Server Error ({err!r})"}).encode()
            answer = (500, {"Content-Type": "application/json"}, data)
        if answer is None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, headers, data = answer
        if not isinstance(data, bytes):
            self._stream(status, headers, data)
            return
        if status in (204, 304):
            data = b""
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if method != "HEAD" and data:
            self.wfile.write(data)

    def _stream(self, status: int, headers: dict[str, str], chunks: Iterator[bytes]) -> None:
        """A body written as it is produced, ended by closing the connection (no length)."""
        self.close_connection = True
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(OSError):
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _ListenerServer(ThreadingHTTPServer):
    daemon_threads = True
    listener: LoopbackListener

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def track(self, connection: socket.socket, *, add: bool) -> None:
        with self._connections_lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout test) is not an error of the fake.
        error = sys.exc_info()[1]
        if not isinstance(error, (BrokenPipeError, ConnectionResetError, ssl.SSLError)):
            super().handle_error(request, client_address)


class LoopbackListener:
    """The HTTP(S) server thread every fake runs on: start, stop (cutting open
    connections), restart on the same port; each request goes to `serve`."""

    def __init__(
        self,
        serve: Serve,
        *,
        name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsFiles | None = None,
        methods: Iterable[str] = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"),
        protocol: str = "HTTP/1.0",
        server_version: str = BaseHTTPRequestHandler.server_version,
    ) -> None:
        self.serve = serve
        self.name = name
        self.host = host
        self.port = port
        self.tls = tls
        self.methods = frozenset(methods)
        self.protocol = protocol
        self.server_version = server_version
        self._server: _ListenerServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether it is serving now."""
        return self._server is not None

    def start(self) -> None:
        """Listen (on an ephemeral port the first time unless one was given, on the
        same port after a stop)."""
        if self._server is not None:
            return
        server = _ListenerServer((self.host, self.port), _ListenerHandler)
        server.listener = self
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.cert_file, self.tls.key_file)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.name}:{self.port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and cut open connections (new ones are then refused)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def url(self, scheme: str | None = None) -> str:
        """The base URL (http, or https with TLS)."""
        if not self.port:
            raise RuntimeError(f"{self.name} is not started")
        scheme = scheme or ("https" if self.tls is not None else "http")
        return f"{scheme}://{self.host}:{self.port}"


@dataclass
class _Failure:
    path: str
    status: int
    count: int
    body: Any = field(default_factory=lambda: {"message": "injected failure"})


class LoopbackServer:
    """A fake service on loopback (see the module docstring)."""

    name = "fake"

    def __init__(self, *, tls_dir: Path | None = None) -> None:
        self.tls = make_tls(tls_dir) if tls_dir is not None else None
        self.requests: list[Request] = []
        self.delay = 0.0
        # While set to an Event not yet set, requests hang until it is (a stuck service).
        self.gate: threading.Event | None = None
        self._failures: list[_Failure] = []
        self._lock = threading.RLock()
        self._listener = LoopbackListener(
            self._serve, name=self.name, tls=self.tls, methods=("GET", "POST")
        )

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> LoopbackServer:
        """Start serving (on the same port again after a `stop()`)."""
        self._listener.start()
        return self

    def stop(self) -> None:
        """Stop serving (connections are then refused); `start()` reuses the port."""
        self._listener.stop()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL, https when the fake serves TLS."""
        return self._listener.url()

    @property
    def ca_file(self) -> str:
        assert self.tls is not None, "not a TLS fake"
        return str(self.tls.ca_file)

    # ----------------------------------------------------------------- test controls

    def fail_next(self, path: str, status: int = 500, count: int = 1) -> None:
        """Answer the next `count` requests to `path` with `status`."""
        with self._lock:
            self._failures.append(_Failure(path, status, count))

    def count(self, path: str) -> int:
        """How many requests went to `path`."""
        with self._lock:
            return sum(1 for request in self.requests if request.path == path)

    # ----------------------------------------------------------------- serving

    def _serve(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        request = Request(method, target, {k.lower(): v for k, v in headers.items()})
        status, payload, extra = self._dispatch(request)
        data = b"" if payload is None else json.dumps(payload).encode()
        return status, {"Content-Type": "application/json", **extra}, data

    def _dispatch(self, request: Request) -> Response:
        with self._lock:
            self.requests.append(request)
            failure = next((f for f in self._failures if f.path == request.path), None)
            if failure is not None:
                failure.count -= 1
                if failure.count <= 0:
                    self._failures.remove(failure)
        if self.delay:
            time.sleep(self.delay)
        gate = self.gate
        if gate is not None:
            gate.wait(timeout=30)
        if failure is not None:
            return failure.status, failure.body, {}
        return self.handle(request)

    def handle(self, request: Request) -> Response:
        raise NotImplementedError
