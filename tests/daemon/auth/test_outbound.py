"""Documents fetched for authentication (OIDC discovery and keys, OpenShift's users/~)
are read no further than their bound, whatever length their sender announces, and no
longer than the client's timeout, however slowly they come."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from wq.daemon.auth import AuthenticationUnavailable
from wq.daemon.auth.outbound import MAX_DOCUMENT_BYTES, fetch_json, make_client


class EndlessSender:
    """A server whose one answer is a 200 without a length that goes on: `CHUNK` after
    `CHUNK`, `GAP` seconds apart, up to `LIMIT` bytes; it counts what it could send
    before the client hung up."""

    CHUNK, GAP, LIMIT = b"[" * 65536, 0.0, 64 * MAX_DOCUMENT_BYTES

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/jwks"

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            try:
                while self.sent < self.LIMIT:
                    connection.sendall(self.CHUNK)
                    self.sent += len(self.CHUNK)
                    if self.GAP:
                        threading.Event().wait(self.GAP)
            except OSError:
                pass  # the client hung up


class DrippingSender(EndlessSender):
    """A byte at a time, each well within a read timeout: 30 s of them, if let."""

    CHUNK, GAP, LIMIT = b" ", 0.1, 300


@pytest.fixture
def sender() -> Iterator[EndlessSender]:
    server = EndlessSender()
    server.thread.start()
    yield server
    server.listener.close()


def test_an_endless_document_is_refused_once_past_its_bound(sender: EndlessSender) -> None:
    client = make_client(timeout=10)
    try:
        with pytest.raises(AuthenticationUnavailable, match="is too large"):
            fetch_json(client, sender.url, what="the keys")
    finally:
        client.close()
    sender.thread.join(timeout=10)
    # It stopped reading near the bound (the socket's buffers hold a little more).
    assert sender.sent < 8 * MAX_DOCUMENT_BYTES, sender.sent


def test_an_unreachable_sender_is_said_as_such() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    client = make_client(timeout=2)
    try:
        with pytest.raises(AuthenticationUnavailable, match="cannot connect"):
            fetch_json(client, f"http://127.0.0.1:{port}/jwks", what="the keys")
    finally:
        client.close()


def test_a_trickling_answer_is_given_up_within_the_timeout() -> None:
    # An issuer that answers a byte at a time held every request waiting on its keys
    # (the local token's too, once they had the request threads) for as long as it went on.
    sender = DrippingSender()
    sender.thread.start()
    client = make_client(timeout=1)
    try:
        with pytest.raises(AuthenticationUnavailable, match="timed out"):
            fetch_json(client, sender.url, what="the keys")
    finally:
        client.close()
        sender.listener.close()
    sender.thread.join(timeout=40)
    assert sender.sent < DrippingSender.LIMIT // 5, sender.sent
