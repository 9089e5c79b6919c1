"""Load shedding: a request that would queue behind too many others is answered 503 at once.

The daemon's one request thread is held by a caller whose token takes an identity
provider (a slow fake) to verify, a second request waits for that thread, and the
third is refused at once with `Retry-After`, while the probes and GitLab's webhook
are still answered; the client sends such a GET again after the wait it is told. On
SQLite and PostgreSQL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from anyio import to_thread
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.conftest import Store, make_config
from tests.daemon.auth.conftest import AUD
from tests.daemon.test_api import locks_waited_on
from tests.fakes.oidc import FakeOidcIssuer
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.client.api import ApiClient
from wq.client.credentials import Credentials
from wq.client.errors import ServerError
from wq.daemon import shedding
from wq.daemon.app import create_app
from wq.daemon.runtime import build_runtime
from wq.engine.outage import Episode

IDP_DELAY = 1.0  # seconds the fake identity provider takes per answer


@pytest.fixture
def client(
    store: Store, fake_oidc: FakeOidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    monkeypatch.setenv("WQ_TEST_SHEDDING_SECRET", "the-webhook-secret")
    # An episode ends at the first request let in (see test_an_overload_is_one_episode).
    monkeypatch.setattr(shedding, "QUIET_SECONDS", 0.0)
    authorization = {
        "rules": [{"issuer": fake_oidc.issuer, "claims": {"aud": AUD}, "permissions": ["read"]}]
    }
    config = make_config(
        store.url,
        authorization=authorization,
        server={"request_threads": 1, "max_waiting_requests": 1},
        events={"webhook_secret_env": "WQ_TEST_SHEDDING_SECRET"},
    )
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    with TestClient(create_app(runtime), raise_server_exceptions=False) as test_client:
        yield test_client
    runtime.authenticator.close()
    runtime.engine.dispose()


def limiter_state(client: TestClient) -> tuple[int, int]:
    """Requests on a thread and waiting for one, as the daemon's event loop sees them."""

    def read() -> tuple[int, int]:
        statistics = to_thread.current_default_thread_limiter().statistics()
        return int(statistics.borrowed_tokens), statistics.tasks_waiting

    return client.portal.call(read)  # type: ignore[union-attr]


Send = Callable[[str, str, dict[str, str]], tuple[threading.Thread, list[Any]]]


@pytest.fixture
def in_background(client: TestClient) -> Iterator[Send]:
    """Send a request from another thread; its answer lands in the list returned.

    The threads are joined before the app stops, also when a test fails: stopping it
    while they are in flight hung until pytest's timeout.
    """
    threads: list[threading.Thread] = []

    def send(method: str, path: str, headers: dict[str, str]) -> tuple[threading.Thread, list[Any]]:
        answers: list[Any] = []
        thread = threading.Thread(
            target=lambda: answers.append(client.request(method, path, headers=headers, json={}))
        )
        thread.start()
        threads.append(thread)
        return thread, answers

    yield send
    for thread in threads:
        thread.join(timeout=30)


def test_a_request_beyond_the_waiting_bound_is_refused_at_once(
    client: TestClient,
    in_background: Send,
    fake_oidc: FakeOidcIssuer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wq.daemon")
    token = fake_oidc.token(sub="reader", aud=AUD)
    bearer = {"Authorization": f"Bearer {token}"}
    fake_oidc.delay = IDP_DELAY
    # The first caller holds the only thread while its token is checked.
    first, first_answer = in_background("GET", "/api/work-items", bearer)
    wait_for(lambda: limiter_state(client) == (1, 0), message="the first request on the thread")
    # The second waits for that thread.
    second, second_answer = in_background("GET", "/api/work-items", bearer)
    wait_for(lambda: limiter_state(client) == (1, 1), message="the second request waiting")

    started = time.monotonic()
    refused = client.get("/api/work-items", headers=bearer)
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "1"
    assert refused.json() == {"error": "the daemon is overloaded"}  # as every error says it
    # At once: neither behind the identity provider nor behind the other requests.
    assert time.monotonic() - started < IDP_DELAY
    # The probes are answered meanwhile; GitLab's webhook is never refused for load.
    assert client.get("/healthz").status_code == 200
    webhook, webhook_answer = in_background(
        "POST", "/api/webhooks/gitlab", {"X-Gitlab-Token": "not-the-secret"}
    )
    first.join(timeout=30)
    second.join(timeout=30)
    webhook.join(timeout=30)
    assert first_answer[0].status_code == 200, first_answer[0].text
    assert second_answer[0].status_code == 200, second_answer[0].text
    assert webhook_answer[0].status_code == 401  # its secret is checked: it was let in

    # The backlog is gone: requests are let in again, and the episode is logged once.
    fake_oidc.delay = 0
    assert client.get("/api/work-items", headers=bearer).is_success
    messages = [r.getMessage() for r in caplog.records if r.name == "wq.daemon"]
    assert (
        sum("overloaded: 2 requests in progress, 1 waiting for a thread" in m for m in messages)
        == 1
    )
    assert any("no longer overloaded" in m and "1 requests answered 503" in m for m in messages)
    metrics = client.get("/metrics").text
    assert "http_requests_shed_total 1.0" in metrics
    assert 'http_requests_total{method="GET",route="/api/work-items",status="503"} 1.0' in metrics


def through(client: TestClient) -> httpx.MockTransport:
    """An httpx transport handing each request to the app under test."""

    def send(request: httpx.Request) -> httpx.Response:
        answer = client.request(
            request.method, str(request.url), headers=request.headers, content=request.content
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    return httpx.MockTransport(send)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_reads_awaited_on_the_event_loop_count_toward_the_bound(
    client: TestClient, in_background: Send, store: Store
) -> None:
    # GET list awaits PostgreSQL on the event loop: no thread is held or waited for,
    # yet 1 + 1 requests in progress are the bound (request_threads, max_waiting).
    local = client.app.state.runtime.local_tier  # type: ignore[attr-defined]
    bearer = {"Authorization": f"Bearer {local.token}"}
    with store.engine.connect() as locker:
        locker.execute(text("LOCK TABLE work_items IN ACCESS EXCLUSIVE MODE"))
        first, first_answer = in_background("GET", "/api/work-items", bearer)
        second, second_answer = in_background("GET", "/api/work-items", bearer)
        # One holds the reads' one connection (as many as request threads),
        # waiting for the lock; the other waits for that connection.
        wait_for(lambda: locks_waited_on(store) == 1, message="a read waiting for the lock")
        wait_for(lambda: waiting_for_a_connection(client) == 1, message="a read waiting")
        assert limiter_state(client) == (0, 0)

        refused = client.get("/api/work-items", headers=bearer)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        locker.rollback()
    first.join(timeout=30)
    second.join(timeout=30)
    assert [first_answer[0].status_code, second_answer[0].status_code] == [200, 200]
    assert client.get("/api/work-items", headers=bearer).status_code == 200


def waiting_for_a_connection(client: TestClient) -> int:
    """Reads on the event loop waiting for one of their connections."""
    return int(client.app.state.loop_reads.connections.waiting)  # type: ignore[attr-defined]


def test_the_client_sends_a_refused_get_again_and_never_a_refused_post(
    client: TestClient, in_background: Send, fake_oidc: FakeOidcIssuer
) -> None:
    token = fake_oidc.token(sub="reader", aud=AUD)
    bearer = {"Authorization": f"Bearer {token}"}
    credentials = Credentials(str(client.base_url), environ={"WQ_TOKEN": token}, login=None)
    api = ApiClient(str(client.base_url), credentials=credentials, transport=through(client))
    fake_oidc.delay = IDP_DELAY / 2
    first, first_answer = in_background("GET", "/api/work-items", bearer)
    wait_for(lambda: limiter_state(client) == (1, 0), message="the first request on the thread")
    second, second_answer = in_background("GET", "/api/work-items", bearer)
    wait_for(lambda: limiter_state(client) == (1, 1), message="the second request waiting")

    # A POST is refused at once and not sent again: it might be done twice.
    started = time.monotonic()
    with pytest.raises(ServerError, match="overloaded") as refused:
        api.request("POST", "/api/work-items/chain", json={"name": "x"})
    assert time.monotonic() - started < 1  # no wait for a second attempt
    # The wait is said once, in the hint (from Retry-After), not again in the message.
    assert str(refused.value) == "service unavailable: the daemon is overloaded"
    assert refused.value.hint == "try again in 1s"
    # A GET waits as told (Retry-After: 1) and is answered once the backlog is gone.
    started = time.monotonic()
    assert api.request("GET", "/api/work-items") == {"items": [], "next_cursor": None}
    assert time.monotonic() - started >= 1
    first.join(timeout=30)
    second.join(timeout=30)
    assert first_answer[0].status_code == second_answer[0].status_code == 200


def test_an_overload_is_one_episode_while_requests_are_let_in_between_refusals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under a sustained overload most requests are let in between refusals; the log
    says it began and ended once, not once per request let in."""
    caplog.set_level(logging.INFO, logger="wq.test")
    overload = Episode(
        logging.getLogger("wq.test"),
        began="began: {detail}",
        lasting="lasting {count}",
        ended="ended: {count}",
        quiet_seconds=0.5,
    )
    for _ in range(3):
        overload.occurred("busy")
        overload.ended()  # a request let in right after a refusal
    assert overload.active
    time.sleep(0.6)
    overload.ended()
    assert not overload.active
    assert [r.getMessage() for r in caplog.records] == ["began: busy", "ended: 3"]
