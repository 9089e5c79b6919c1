"""A small base for fake services: a real HTTP(S) server on 127.0.0.1, ephemeral port.

Subclasses answer `handle(request)` with `(status, json_body, headers)`. Every request
is logged (`requests`), failures can be injected per path (`fail_next`), a delay added
(`delay`), and `tls_dir` serves HTTPS with a fresh CA whose file is `ca_file`.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import sys
import threading
import time
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


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        fake = self.server.fake
        request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        status, body, headers = fake._dispatch(request)
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = _serve
    do_POST = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a timeout test) is not an error of the fake.
        error = sys.exc_info()[1]
        if not isinstance(error, (BrokenPipeError, ConnectionResetError, ssl.SSLError)):
            super().handle_error(request, client_address)


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
        self._failures: list[_Failure] = []
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> LoopbackServer:
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", self._port), _Handler)
        server.fake = self
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.cert_file, self.tls.key_file)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.name}:{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (connections are then refused); `start()` reuses the port."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError(f"{self.name} is not started")
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._port}"

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
        if failure is not None:
            return failure.status, failure.body, {}
        return self.handle(request)

    def handle(self, request: Request) -> Response:
        raise NotImplementedError
