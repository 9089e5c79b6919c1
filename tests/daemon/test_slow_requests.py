"""Slow and stalled requests against a real daemon process: a head or a body that does
not arrive in time is answered 408 and frees its place, a webhook without its secret is
refused before its body is read, and one caller sending bodies slowly cannot take every
place the daemon lets requests into (on SQLite: the limits are the HTTP layer's)."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.daemon import test_daemon_process as process
from tests.daemon.auth.conftest import AUD
from tests.daemon.test_daemon_process import (
    Daemon,
    clean_env,
    read_to_close,
    read_token,
    run_wq,
    start_daemon,
    write,
)
from tests.fakes.oidc import FakeOidcIssuer
from tests.fakes.oidc import fake_oidc as fake_oidc

# The process tests' fixtures, used here by name.
daemons = process.daemons
no_system_config = process.no_system_config


def sqlite_daemon(
    tmp_path: Path,
    daemons: list[Daemon],
    server: str,
    *,
    webhook_secret: str | None = None,
    extra: str = "",
) -> Daemon:
    """A migrated, healthy daemon on SQLite with the local token, handling tasks, and
    these `server` settings (a YAML mapping); with `webhook_secret`, the GitLab webhook;
    `extra` is more of the config file."""
    env = clean_env(tmp_path)
    events = ""
    if webhook_secret is not None:
        env["WQ_TEST_WEBHOOK_SECRET"] = webhook_secret
        events = "events: {webhook_secret_env: WQ_TEST_WEBHOOK_SECRET}\n"
    config = write(
        tmp_path / "wq.yml",
        f"database_url: sqlite:///{tmp_path / 'wq.db'}\n"
        f"server: {server}\n"
        "auth: {local_token: true}\n"
        "handled_types: {task: {}}\n" + events + extra,
    )
    assert run_wq("db", "migrate", "-c", str(config), env=env, cwd=tmp_path).returncode == 0
    daemon = start_daemon(daemons, tmp_path, env, "-c", str(config))
    daemon.wait_healthy()
    return daemon


def stalled_bodies(
    daemon: Daemon, token: str, count: int, *, timeout: float
) -> list[socket.socket]:
    """Connections that each send a submission's head and the first bytes of its body,
    then nothing more."""
    host, port = daemon.url.removeprefix("http://").split(":")
    head = (
        "POST /api/work-items/task HTTP/1.1\r\nHost: wq\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nContent-Length: 1000\r\n\r\n"
    ).encode()
    stalled = [socket.create_connection((host, int(port)), timeout=timeout) for _ in range(count)]
    for sock in stalled:
        sock.sendall(head + b'{"project":')
    return stalled


@pytest.mark.usefixtures("no_system_config")
def test_a_body_that_stalls_is_answered_408_and_frees_its_place(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    """Authenticated clients that send half a body and stop held the requests the daemon
    lets in (`request_threads` + `max_waiting_requests`) for ever: every other request
    was answered 503. Now each is answered 408 once `server.body_timeout_seconds` is over
    (and a caller's bodies beyond its share 429 at once)."""
    daemon = sqlite_daemon(
        tmp_path, daemons, "{body_timeout_seconds: 1, request_threads: 1, max_waiting_requests: 1}"
    )
    _, token = read_token(tmp_path, daemon.url)
    stalled = stalled_bodies(daemon, token, 3, timeout=10)
    try:
        started = time.monotonic()
        answers = [read_to_close(sock) for sock in stalled]
        waited = time.monotonic() - started
    finally:
        for sock in stalled:
            sock.close()
    # The first was let in and timed out; the others were over the caller's share of
    # the two places (one body at a time) and answered at once.
    statuses = sorted(answer.split(b" ", 2)[1] for answer in answers)
    assert statuses == [b"408", b"429", b"429"], answers
    assert b"body_timeout_seconds" in b"".join(answers)
    assert waited < 8, waited
    pools = httpx.get(
        f"{daemon.url}/api/pools", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert pools.status_code == 200, pools.text


@pytest.mark.usefixtures("no_system_config")
def test_a_webhook_without_the_secret_is_refused_before_its_body_arrives(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    """The GitLab webhook read a whole body (up to `server.max_body_bytes`, from anyone
    who could reach it) before it compared the secret: a caller without it sending a
    large body slowly got its 401 (or a 408) only once the body was in, holding the
    daemon's memory meanwhile. Now the secret is compared first; with it, the body is
    still bounded in time."""
    daemon = sqlite_daemon(
        tmp_path, daemons, "{body_timeout_seconds: 20}", webhook_secret="the-secret"
    )
    host, port = daemon.url.removeprefix("http://").split(":")

    def post(token: str | None) -> tuple[bytes, float]:
        head = "POST /api/webhooks/gitlab HTTP/1.1\r\nHost: wq\r\nContent-Length: 1000000\r\n"
        if token is not None:
            head += f"X-Gitlab-Token: {token}\r\nX-Gitlab-Event: Pipeline Hook\r\n"
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head.encode() + b"\r\n{")  # and nothing more
            started = time.monotonic()
            answer = sock.recv(65536)
            waited = time.monotonic() - started
            with contextlib.suppress(OSError):  # the rest, until the daemon closes
                while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                    if not (chunk := sock.recv(65536)):
                        break
                    answer += chunk
            return answer, waited

    for token in (None, "wrong"):
        answer, waited = post(token)
        assert answer.split(b" ", 2)[1] == b"401", answer
        assert waited < 10, waited  # at once, not after the body's 20 s
    daemon = sqlite_daemon(
        tmp_path / "slow", daemons, "{body_timeout_seconds: 1}", webhook_secret="the-secret"
    )
    host, port = daemon.url.removeprefix("http://").split(":")
    answer, waited = post("the-secret")
    assert answer.split(b" ", 2)[1] == b"408", answer
    assert b"body_timeout_seconds" in answer


@pytest.mark.usefixtures("no_system_config")
def test_a_head_that_does_not_arrive_is_answered_408_and_closed(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    """A connection that sends nothing, or half a request head, was held open for ever
    (uvicorn times a connection out only after a response): anyone could pin sockets and
    a megabyte of buffered head each. Now the head has `server.head_timeout_seconds`."""
    daemon = sqlite_daemon(tmp_path, daemons, "{head_timeout_seconds: 1}")
    host, port = daemon.url.removeprefix("http://").split(":")
    silent, partial, slow = (socket.create_connection((host, int(port)), timeout=10) for _ in "abc")
    try:
        partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: wq\r\nX-Pad: ")
        # A head may take a while, as long as it ends in time.
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        time.sleep(0.3)
        slow.sendall(b"Host: wq\r\nConnection: close\r\n\r\n")
        answers = [read_to_close(sock) for sock in (silent, partial, slow)]
    finally:
        for sock in (silent, partial, slow):
            sock.close()
    assert [answer.split(b" ", 2)[1] for answer in answers] == [b"408", b"408", b"200"], answers
    assert b"server.head_timeout_seconds" in answers[0]
    assert httpx.get(f"{daemon.url}/healthz", timeout=10).status_code == 200
    assert "Traceback" not in daemon.log()


def answered(sock: socket.socket) -> bool:
    """Whether the daemon has sent something on this connection already."""
    sock.setblocking(False)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        sock.setblocking(True)
        sock.settimeout(30)


@pytest.mark.usefixtures("no_system_config")
def test_one_caller_sending_bodies_slowly_leaves_room_for_other_callers(
    tmp_path: Path, daemons: list[Daemon], fake_oidc: FakeOidcIssuer
) -> None:
    """Eight half-sent bodies from one token held all eight places the daemon lets in
    (2 threads + 6 waiting) until `server.body_timeout_seconds`: every other caller got
    503 meanwhile. Now a caller sends at most a quarter of them at once (429 beyond)."""
    rules = (
        f"authorization: {{rules: [{{issuer: '{fake_oidc.issuer}', claims: {{aud: {AUD}}},"
        " permissions: [read, submit]}]}\n"
    )
    daemon = sqlite_daemon(
        tmp_path,
        daemons,
        "{body_timeout_seconds: 20, request_threads: 2, max_waiting_requests: 6}",
        extra=rules,
    )
    _, local = read_token(tmp_path, daemon.url)
    stalled = stalled_bodies(daemon, local, 8, timeout=30)
    try:
        time.sleep(0.5)
        other = {"Authorization": f"Bearer {fake_oidc.token(aud=AUD, sub='other')}"}
        with httpx.Client(base_url=daemon.url, headers=other, timeout=10) as client:
            listed = client.get("/api/work-items")
            submitted = client.post("/api/work-items/task", json={"project": "demo"})
        over = [read_to_close(sock) for sock in stalled if answered(sock)]
    finally:
        for sock in stalled:
            sock.close()
    assert listed.status_code == 200, listed.text
    # Its body was read and judged (a task needs a kind), not refused for want of room.
    assert submitted.status_code == 422, submitted.text
    assert len(over) == 6, over
    for answer in over:
        assert answer.startswith(b"HTTP/1.1 429"), answer
        assert b"retry-after: 1" in answer.lower() and b"request bodies" in answer
