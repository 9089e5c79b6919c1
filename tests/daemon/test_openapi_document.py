"""The OpenAPI document states every answer a route gives, and the formats it takes."""

from __future__ import annotations

import re
import uuid
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.daemon.test_api import add_item
from wq.daemon.runtime import Runtime
from wq.daemon.schemas import Admission, Lane, Phase
from wq.engine.models import ADMISSION_STATES, LANES, PHASES

# What an /api/ route that takes a body can answer: not JSON, no token, no permission,
# too slow, too large, not application/json, invalid, the caller's share of bodies,
# headers too large, unavailable.
WITH_BODY = {400, 401, 403, 408, 413, 415, 422, 429, 431, 503}
# Every status each route can answer besides its successes (see wq.daemon.contract).
ERRORS = {
    ("get", "/healthz"): {431},
    ("get", "/readyz"): {431, 503},
    ("get", "/metrics"): {431},
    ("get", "/api/whoami"): {401, 431, 503},
    ("post", "/oauth/token"): {401, 422, 431},
    ("get", "/api/work-items"): {401, 403, 422, 431, 503},
    ("get", "/api/work-items/{item_id}"): {401, 403, 404, 422, 431, 503},
    ("get", "/api/work-items/{item_id}/history"): {401, 403, 404, 422, 431, 503},
    ("post", "/api/work-items/{item_id}/retry"): WITH_BODY | {404, 409},
    ("post", "/api/work-items/{item_id}/cancel"): WITH_BODY | {404, 409},
    ("post", "/api/work-items/chain"): WITH_BODY | {409, 429},
    ("get", "/api/pools"): {401, 403, 431, 503},
    ("get", "/api/pools/{project}"): {401, 403, 422, 431, 503},
    ("get", "/api/queue"): {401, 403, 422, 431, 503},
    ("get", "/api/queue/{lane}"): {401, 403, 422, 431, 503},
    ("get", "/api/stats"): {401, 403, 422, 431, 503},
    ("get", "/api/replicas"): {401, 403, 422, 431, 503},
    ("get", "/api/work-items/{item_id}/logs"): {401, 403, 404, 409, 422, 431, 503},
    ("post", "/api/work-items/retry"): WITH_BODY,
    ("post", "/api/work-items/cancel"): WITH_BODY,
    ("get", "/api/work-items/{item_id}/pending-events"): {401, 403, 404, 422, 431, 503},
    ("post", "/api/webhooks/gitlab"): {400, 401, 404, 408, 413, 422, 431, 503},
}
ERROR_REF = "#/components/schemas/ErrorBody"


@pytest.fixture
def document(anon: TestClient) -> dict[str, Any]:
    response = anon.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def error_statuses(operation: dict[str, Any]) -> set[int]:
    return {int(code) for code in operation["responses"] if int(code) >= 400}


def test_every_route_lists_the_errors_it_can_give(document: dict[str, Any]) -> None:
    listed = {
        (method, path): error_statuses(operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }
    assert listed == ERRORS


def test_every_error_has_the_error_body_and_its_headers(document: dict[str, Any]) -> None:
    body = document["components"]["schemas"]["ErrorBody"]
    assert body["required"] == ["error"]
    assert set(body["properties"]) == {"error", "problems"}
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for code, response in operation["responses"].items():
                if int(code) < 400 or (path, code) == ("/readyz", "503"):
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": ERROR_REF}, (method, path, code)
                assert response["description"]
                if code == "503":
                    assert response["headers"]["Retry-After"]["required"] is True
                if code == "401":
                    assert "WWW-Authenticate" in response["headers"]


def test_the_answers_have_the_documented_shape(
    anon: TestClient, client: TestClient, token: str
) -> None:
    unauthenticated = anon.get("/api/work-items")
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["WWW-Authenticate"] == "Bearer"
    assert set(unauthenticated.json()) == {"error"}
    invalid = client.get("/api/work-items", params={"limit": "0"})
    assert invalid.status_code == 422
    assert set(invalid.json()) == {"error", "problems"}
    assert invalid.json()["problems"] == ["query.limit: Input should be greater than or equal to 1"]
    undecodable = client.post(
        "/api/work-items/chain", content=b"\xff{", headers={"Content-Type": "application/json"}
    )
    assert undecodable.status_code == 400, undecodable.text
    assert set(undecodable.json()) == {"error"}


def parameter(document: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    (found,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == name]
    return dict(found["schema"]["anyOf"][0])


def test_the_cursor_formats_are_in_the_document(document: dict[str, Any]) -> None:
    items = parameter(document, "/api/work-items", "cursor")
    assert items["pattern"] == r"^[0-9]{1,17}-[0-9a-f]{32}$"
    for path in ("/api/work-items/{item_id}/history", "/api/work-items/{item_id}/pending-events"):
        assert parameter(document, path, "cursor")["pattern"] == r"^[1-9][0-9]{0,17}$"
    assert parameter(document, "/api/queue/{lane}", "cursor")["pattern"] == r"^[0-9]{1,18}$"


def test_an_issued_cursor_matches_its_pattern_and_any_match_is_taken(
    client: TestClient, store: Store, runtime: Runtime, document: dict[str, Any]
) -> None:
    for _ in range(3):
        add_item(store, runtime)
    page = client.get("/api/work-items", params={"limit": 1}).json()
    pattern = parameter(document, "/api/work-items", "cursor")["pattern"]
    assert re.fullmatch(pattern, page["next_cursor"])
    following = client.get("/api/work-items", params={"limit": 5, "cursor": page["next_cursor"]})
    assert following.status_code == 200 and len(following.json()["items"]) == 2
    # A cursor the API never issued but of the documented form is a position, not an error:
    # the schema and the server agree on what a cursor is.
    for forged in ("0-" + "0" * 32, "9" * 17 + "-" + "f" * 32):
        response = client.get("/api/work-items", params={"cursor": forged})
        assert response.status_code == 200, response.text
    assert (
        len(
            client.get("/api/work-items", params={"cursor": "9" * 17 + "-" + "f" * 32}).json()[
                "items"
            ]
        )
        == 3
    )
    item_id = page["items"][0]["id"]
    history = client.get(f"/api/work-items/{item_id}/history", params={"cursor": "9" * 18})
    assert history.status_code == 200, history.text


@pytest.mark.parametrize("cursor", ["0", "01", "9" * 19, "1.5", "-1"])
def test_a_history_cursor_off_the_pattern_is_422(client: TestClient, cursor: str) -> None:
    response = client.get(f"/api/work-items/{uuid.uuid4()}/history", params={"cursor": cursor})
    assert response.status_code == 422, response.text
    assert "cursor" in response.json()["error"]


def test_another_method_on_a_submission_path_names_post(client: TestClient) -> None:
    # Not GET, which the item route `/api/work-items/{item_id}` would have named, and
    # not that route's 422 for an id that is not a UUID.
    for method in ("GET", "HEAD", "PUT", "PATCH", "OPTIONS", "DELETE"):
        response = client.request(method, "/api/work-items/chain")
        assert response.status_code == 405, (method, response.text)
        assert response.headers["Allow"] == "POST"
    item = client.options(f"/api/work-items/{uuid.uuid4()}")
    assert item.status_code == 405 and item.headers["Allow"] == "GET"


def test_the_documented_states_are_the_engines(document: dict[str, Any]) -> None:
    item = document["components"]["schemas"]["WorkItemPublic"]["properties"]
    assert set(item["phase"]["enum"]) == set(PHASES) == set(get_args(Phase))
    assert set(item["admission"]["enum"]) == set(ADMISSION_STATES) == set(get_args(Admission))
    assert set(item["lane"]["enum"]) == set(LANES) == set(get_args(Lane))
