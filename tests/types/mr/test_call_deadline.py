"""The whole-call limit of GitLab requests, against a real server over HTTP and HTTPS."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fakes.loopback import Answer, LoopbackListener, make_tls
from wq.types.mr.call_deadline import CallTimeout, DeadlineSession


def _drip() -> Iterator[bytes]:
    while True:
        yield b"."
        time.sleep(0.1)


def _serve(method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
    if target == "/drip":
        return 200, {"Content-Type": "application/json"}, _drip()
    if target == "/moved":
        return 302, {"Location": "/drip", "Content-Type": "text/plain"}, b""
    # Each connection has a thread of the server's: its name tells connections apart.
    connection = threading.current_thread().name
    return 200, {"Content-Type": "application/json"}, json.dumps(connection).encode()


@pytest.fixture(params=["http", "https"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str | bool]]:
    """A keep-alive server (its base URL, and what `verify` takes for it)."""
    tls = make_tls(tmp_path) if request.param == "https" else None
    listener = LoopbackListener(_serve, name="drip", tls=tls, protocol="HTTP/1.1")
    listener.start()
    try:
        yield listener.url(), (str(tls.ca_file) if tls is not None else True)
    finally:
        listener.stop()


@pytest.mark.parametrize("path", ["/drip", "/moved"])
def test_an_answer_that_never_ends_fails_at_the_deadline(
    server: tuple[str, str | bool], path: str
) -> None:
    url, verify = server
    session = DeadlineSession(0.6)
    started = time.monotonic()
    with pytest.raises(CallTimeout, match=r"no whole answer within 0\.6 s"):
        session.get(url + path, timeout=5, verify=verify)
    assert 0.5 <= time.monotonic() - started < 3
    # A timeout as requests has them: the caller's handling of timeouts applies.
    assert issubclass(CallTimeout, requests.exceptions.Timeout)


def test_calls_within_the_deadline_keep_their_connection(server: tuple[str, str | bool]) -> None:
    url, verify = server
    session = DeadlineSession(0.3)
    first = session.get(url + "/ok", timeout=5, verify=verify)
    time.sleep(0.5)  # past the first call's deadline: its kept-alive socket is left alone
    second = session.get(url + "/ok", timeout=5, verify=verify)
    assert first.json() == second.json()  # the one connection served both calls
