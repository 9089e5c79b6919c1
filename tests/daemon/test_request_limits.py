"""Request bodies and headers: authenticated before read, bounded while read, typed.

Each refusal is checked to leave nothing behind (no item) and to come before the
body is consumed, by counting what the app actually received from the client.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import starlette.requests
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.conftest import Store, make_config
from tests.support.chain import Behaviour, chain_registry
from wq.daemon import body as body_module
from wq.daemon.app import create_app
from wq.daemon.runtime import Runtime, build_runtime
from wq.engine.models import WorkItem

LIMIT = 4096


@pytest.fixture
def limited(store: Store) -> Iterator[tuple[Runtime, str]]:
    config = make_config(store.url, server={"max_body_bytes": LIMIT})
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    yield runtime, runtime.local_tier.token
    runtime.engine.dispose()


def item_count(store: Store) -> int:
    with store.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(WorkItem)) or 0)


def counting_body(total: int, chunk: int = 1024) -> tuple[Iterator[bytes], list[int]]:
    """A streamed body of `total` bytes and a list that records how much was pulled."""
    pulled = [0]

    def chunks() -> Iterator[bytes]:
        sent = 0
        while sent < total:
            size = min(chunk, total - sent)
            pulled[0] += size
            sent += size
            yield b" " * size

    return chunks(), pulled


def test_unauthenticated_body_is_refused_before_it_is_read(
    limited: tuple[Runtime, str], store: Store
) -> None:
    runtime, _ = limited
    body, pulled = counting_body(64 * 1024)
    with TestClient(create_app(runtime), raise_server_exceptions=False) as anon:
        response = anon.post(
            "/api/work-items/chain",
            content=body,
            headers={"Content-Type": "application/json", "Authorization": "Bearer wrong"},
        )
    assert response.status_code == 401, response.text
    # The test client pulls the body chunk by chunk as the app asks for it: nothing
    # (or at most the first chunk) was read.
    assert pulled[0] <= 1024, pulled
    assert item_count(store) == 0


def test_body_over_the_limit_is_413_with_the_limit(
    limited: tuple[Runtime, str], store: Store
) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    big = '{"project": "group/app", "dedup_key": "' + "x" * LIMIT + '"}'
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        # Declared too large.
        declared = client.post("/api/work-items/chain", content=big, headers=headers)
        assert declared.status_code == 413, declared.text
        assert str(LIMIT) in declared.json()["error"]
        # Streamed without a length (chunked): refused while reading.
        body, _ = counting_body(LIMIT * 4)
        streamed = client.post("/api/work-items/chain", content=body, headers=headers)
        assert streamed.status_code == 413, streamed.text
        assert str(LIMIT) in streamed.json()["error"]
        # At the limit: accepted.
        ok = client.post("/api/work-items/chain", json={"project": "group/app"}, headers=headers)
        assert ok.status_code == 201, ok.text
    assert item_count(store) == 1


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_json_is_415(
    limited: tuple[Runtime, str], store: Store, content_type: str | None
) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.post(
            "/api/work-items/chain", content=b'{"project": "group/app"}', headers=headers
        )
    assert response.status_code == 415, response.text
    assert "application/json" in response.json()["error"]
    assert item_count(store) == 0


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"Content-Encoding": "gzip"}, "must be sent uncompressed: Content-Encoding gzip"),
        ({"Content-Type": "application/json; charset=utf-16"}, "not charset=utf-16"),
        ({"Content-Type": 'application/json; charset="latin-1"'}, "not charset=latin-1"),
    ],
)
def test_a_body_that_would_be_misread_is_415(
    limited: tuple[Runtime, str], store: Store, headers: dict[str, str], said: str
) -> None:
    """A gzip body was read as JSON text (a 400 'not valid JSON'), and a charset other
    than UTF-8 was ignored."""
    runtime, token = limited
    sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.post(
            "/api/work-items/chain", content=b'{"project": "group/app"}', headers=sent
        )
        plain = client.post(
            "/api/work-items/chain",
            content=b'{"project": "group/app"}',
            headers={
                **sent,
                "Content-Encoding": "identity",
                "Content-Type": "application/json; charset=UTF-8",
            },
        )
    assert response.status_code == 415, response.text
    assert said in response.json()["error"]
    assert plain.status_code == 201, plain.text
    assert item_count(store) == 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"project": "group/app", "project": "other/app"}',
        b'{"project": "group/app", "payload": {"a": 1, "b": 2, "a": 3}}',
    ],
)
def test_a_key_given_twice_is_400_naming_it(
    limited: tuple[Runtime, str], store: Store, body: bytes
) -> None:
    """The last of the two was taken: a proxy in front that read the first would have
    checked one project and let another through."""
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.post("/api/work-items/chain", content=body, headers=headers)
        once = client.post(
            "/api/work-items/chain", content=body.replace(b'"a": 3', b'"c": 3'), headers=headers
        )
    assert response.status_code == 400, response.text
    twice = "project" if body.count(b'"project"') == 2 else "a"
    assert response.json()["error"] == f"the body gives the key '{twice}' twice in one object"
    assert item_count(store) == (0 if twice == "project" else 1)
    assert (once.status_code == 400) is (twice == "project"), once.text


def test_unknown_work_item_type_is_404_naming_the_known_ones(
    limited: tuple[Runtime, str], store: Store
) -> None:
    runtime, token = limited
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.post(
            "/api/work-items/nope",
            json={"project": "group/app"},
            headers={"Authorization": f"Bearer {token}"},
        )
        anonymous = client.post("/api/work-items/nope", json={"project": "group/app"})
    assert response.status_code == 404, response.text
    assert response.json()["error"] == "unknown work-item type 'nope', known: chain"
    assert anonymous.status_code == 401
    assert item_count(store) == 0


def test_huge_authorization_header_is_answered(limited: tuple[Runtime, str]) -> None:
    runtime, _ = limited
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        token = client.get("/api/work-items", headers={"Authorization": "Bearer " + "a" * 200_000})
        headers = client.get("/api/work-items", headers={"X-Junk": "a" * 600_000})
    assert token.status_code == 401, token.text
    assert headers.status_code == 431, headers.text
    assert "headers exceed" in headers.json()["error"]


def test_a_missing_body_or_media_type_is_said_as_such(
    limited: tuple[Runtime, str], store: Store
) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        empty = client.post("/api/work-items/chain", headers=headers)
        untyped = client.post("/api/work-items/chain", content=b"{}", headers=headers)
    # A 422 "Field required" named nothing; "not none" read as a media type.
    assert (empty.status_code, empty.json()["error"]) == (
        400,
        "the request has no body: a JSON object is expected",
    )
    assert (untyped.status_code, untyped.json()["error"]) == (
        415,
        "the body must be application/json, and no Content-Type was sent",
    )
    assert item_count(store) == 0


def test_a_body_that_is_not_an_object_says_so(limited: tuple[Runtime, str], store: Store) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        answers = {
            body: client.post("/api/work-items/chain", content=body, headers=headers)
            for body in (b"[]", b'"group/app"', b"7", b"null")
        }
    # "Input should be a valid dictionary or object to extract fields from" named no place.
    assert {body: (a.status_code, a.json()["error"]) for body, a in answers.items()} == {
        b"[]": (422, "the body must be a JSON object, not an array"),
        b'"group/app"': (422, "the body must be a JSON object, not a string"),
        b"7": (422, "the body must be a JSON object, not a number"),
        b"null": (422, "the body must be a JSON object, not null"),
    }
    assert item_count(store) == 0


def test_a_pool_is_asked_for_by_a_project_path(limited: tuple[Runtime, str]) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        known = client.get("/api/pools/group/app", headers=headers)
        assert known.status_code == 200 and known.json()["project"] == "group/app"
        # Any string was a pool (`../../`, 9,000 characters) with the default capacities.
        for path, said in [
            ("..%2f..%2f", "no backslash, no leading or trailing /"),
            ("a%2f%2fb", "empty, '.' or '..' segments"),
            ("a" * 600, "at most 512 characters"),
            ("team/%ff", "nor bytes that are not UTF-8"),  # was the pool of "team/\ufffd"
        ]:
            refused = client.get(f"/api/pools/{path}", headers=headers)
            assert refused.status_code == 422, (path, refused.text)
            assert said in refused.json()["error"], refused.text
            assert refused.json()["problems"]
        # The queue's `project` parameter likewise (it took any string but NUL).
        for queue in ("/api/queue", "/api/queue/normal"):
            assert client.get(queue, params={"project": "group/app"}, headers=headers).is_success
            refused = client.get(queue, params={"project": "a//b"}, headers=headers)
            assert refused.status_code == 422 and "query.project" in refused.json()["error"]


def test_a_window_or_step_out_of_its_pattern_is_said_in_words(
    limited: tuple[Runtime, str],
) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        window = client.get("/api/stats", params={"window": "8d"}, headers=headers)
        step = client.get("/api/stats", params={"step": "1s"}, headers=headers)
    # It quoted the regular expression the parameter is matched by.
    assert window.status_code == step.status_code == 422
    assert window.json()["error"] == (
        "query.window: a number and a unit (s, m, h or d), at most 7d, such as 30m, 24h or 7d"
    )
    assert "at least 10s" in step.json()["error"] and "^" not in step.json()["error"]


@pytest.fixture
def webhook_enabled(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("WQ_TEST_LIMITS_HOOK", "the-secret")
    config = make_config(
        store.url,
        server={"max_body_bytes": LIMIT},
        events={"webhook_secret_env": "WQ_TEST_LIMITS_HOOK"},
    )
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    yield runtime
    runtime.engine.dispose()


def test_a_webhooks_body_is_read_only_with_its_secret_and_within_the_limit(
    webhook_enabled: Runtime,
) -> None:
    """A caller without the GitLab webhook's secret made the daemon read its whole body
    before the refusal; with the secret, the body is still bounded."""
    hook = {"X-Gitlab-Event": "Pipeline Hook", "Content-Type": "application/json"}
    with TestClient(create_app(webhook_enabled), raise_server_exceptions=False) as client:
        for token in ({}, {"X-Gitlab-Token": "wrong"}):
            body, pulled = counting_body(LIMIT - 1)
            refused = client.post("/api/webhooks/gitlab", content=body, headers=hook | token)
            assert refused.status_code == 401, refused.text
            assert pulled[0] <= 1024, pulled
        body, _ = counting_body(LIMIT * 4)
        streamed = client.post(
            "/api/webhooks/gitlab", content=body, headers=hook | {"X-Gitlab-Token": "the-secret"}
        )
        assert streamed.status_code == 413, streamed.text
        assert str(LIMIT) in streamed.json()["error"]
        ok = client.post(
            "/api/webhooks/gitlab",
            json={"object_kind": "pipeline", "project": {"path_with_namespace": "g/p"}},
            headers=hook | {"X-Gitlab-Token": "the-secret"},
        )
        assert ok.status_code in (202, 400), ok.text  # read and judged: no 413


def test_a_large_body_being_judged_holds_no_other_request(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parsing megabytes takes seconds: meanwhile the probes and other callers are
    answered (on the event loop, a liveness probe would time out)."""
    config = make_config(store.url)
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    judging, answered = threading.Event(), threading.Event()
    seen_answered: list[bool] = []
    real_check = body_module.check_body

    def slow_check(body: bytes, **limits: int) -> None:
        judging.set()
        seen_answered.append(answered.wait(timeout=10))  # as parsing a huge body would
        real_check(body, **limits)

    monkeypatch.setattr(body_module, "check_body", slow_check)
    large = json.dumps({"project": "group/app", "labels": {"pad": "x" * 100_000}})
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        results: list[int] = []
        sender = threading.Thread(
            target=lambda: results.append(
                client.post(
                    "/api/work-items/chain",
                    content=large,
                    headers=headers | {"Content-Type": "application/json"},
                ).status_code
            )
        )
        sender.start()
        assert judging.wait(timeout=10)
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/whoami", headers=headers).status_code == 200
        answered.set()
        sender.join(timeout=20)
    runtime.engine.dispose()
    assert seen_answered == [True], "other requests waited for the large body's check"
    assert results and results[0] in (201, 422), results


def test_a_body_is_parsed_once_by_the_guard_not_again_on_the_loop(
    limited: tuple[Runtime, str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI parsed every body a second time, on the event loop: a large body of many
    small fields (each within the limits) held everyone for as long again."""
    runtime, token = limited
    parsed_again: list[int] = []

    def counting_loads(body: bytes | str, **kwargs: Any) -> Any:
        parsed_again.append(len(body))
        return json.loads(body, **kwargs)

    monkeypatch.setattr(starlette.requests, "json", SimpleNamespace(loads=counting_loads))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        small = client.post("/api/work-items/chain", json={"project": "a/b"}, headers=headers)
        labels = {f"k{n}": "v" for n in range(300)}  # ~4 KiB: within LIMIT
        wide = client.post(
            "/api/work-items/chain",
            content=json.dumps({"project": "a/c", "labels": labels}),
            headers=headers,
        )
    assert small.status_code == 201, small.text
    assert wide.status_code in (201, 422), wide.text
    assert parsed_again == []
    assert item_count(store) == 1 + (wide.status_code == 201)


def test_a_body_of_very_many_fields_is_refused_by_its_count(store: Store) -> None:
    # A million small keys passed every field's limit; FastAPI then validated each on
    # the event loop and answered a 422 of 100 MB, one problem per key.
    config = make_config(store.url)
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    assert runtime.local_tier is not None
    headers = {"Authorization": f"Bearer {runtime.local_tier.token}"}
    document = {"project": "a/b"} | {f"k{n}": 0 for n in range(1500)}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.post("/api/work-items/chain", json=document, headers=headers)
    runtime.engine.dispose()
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "body: 1,501 fields, at most 1,000"
    assert item_count(store) == 0


def test_a_422_lists_twenty_problems_and_counts_the_rest(limited: tuple[Runtime, str]) -> None:
    runtime, token = limited
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        response = client.post(
            "/api/work-items/retry",
            json={"phase": "failed", "ids": [f"not-an-id-{n}" for n in range(50)]},
            headers=headers,
        )
    assert response.status_code == 422, response.text
    problems = response.json()["problems"]
    assert len(problems) == 21, problems
    assert problems[0].startswith("ids.0: "), problems[0]
    assert problems[-1].startswith("... and ") and problems[-1].endswith(" more problems")


def test_a_large_webhook_body_being_parsed_holds_no_other_request(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook parsed its body on the event loop: a 15 MB pipeline event held every
    request and probe for over a second. A large one is parsed on a thread now."""
    monkeypatch.setenv("WQ_TEST_LIMITS_HOOK", "the-secret")
    config = make_config(store.url, events={"webhook_secret_env": "WQ_TEST_LIMITS_HOOK"})
    runtime = build_runtime(config, registry=chain_registry(Behaviour()))
    parsing, answered = threading.Event(), threading.Event()
    seen_answered: list[bool] = []
    real_parse = body_module.parse_json

    def slow_parse(body: bytes) -> Any:
        if len(body) > body_module.INLINE_CHECK_BYTES:
            parsing.set()
            seen_answered.append(answered.wait(timeout=10))  # as parsing megabytes would
        return real_parse(body)

    monkeypatch.setattr(body_module, "parse_json", slow_parse)
    event = {"object_kind": "pipeline", "project": {"path_with_namespace": "g/p"}}
    large = json.dumps({**event, "builds": [{"id": n, "name": "x" * 50} for n in range(500)]})
    headers = {
        "X-Gitlab-Event": "Pipeline Hook",
        "X-Gitlab-Token": "the-secret",
        "Content-Type": "application/json",
    }
    with TestClient(create_app(runtime), raise_server_exceptions=False) as client:
        results: list[int] = []
        sender = threading.Thread(
            target=lambda: results.append(
                client.post("/api/webhooks/gitlab", content=large, headers=headers).status_code
            )
        )
        sender.start()
        assert parsing.wait(timeout=10)
        assert client.get("/healthz").status_code == 200
        small = client.post("/api/webhooks/gitlab", json=event, headers=headers)
        assert small.status_code == 202, small.text
        answered.set()
        sender.join(timeout=20)
    runtime.engine.dispose()
    assert seen_answered == [True], "other requests waited for the large body's parse"
    assert results == [202], results
