"""Every HTTP error status maps to one typed error, one line, and its exit code."""

from __future__ import annotations

import httpx
import pytest

from wq.client.errors import (
    AuthenticationRequired,
    ClientError,
    Conflict,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    Refused,
    ServerError,
    ServerUnreachable,
    error_for_status,
)
from wq.client.transport import ApiTransport


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (401, AuthenticationRequired, 4),
        (403, PermissionDenied, 4),
        (404, NotFound, 3),
        (409, Conflict, 5),
        (429, Refused, 5),
        (400, InvalidRequest, 2),
        (422, InvalidRequest, 2),
        (500, ServerError, 1),
        (502, ServerError, 1),
        (503, ServerError, 1),
    ],
)
def test_status_to_error(status: int, kind: type[ClientError], code: int) -> None:
    error = error_for_status(status, {"error": "the server's words"}, what="GET /api/x")
    assert type(error) is kind and error.exit_code == code and error.status == status
    assert "the server's words" in error.message and "\n" not in error.message


def test_retry_after_becomes_a_hint() -> None:
    error = error_for_status(429, {"error": "not enqueued"}, what="POST", retry_after="7")
    assert error.hint == "try again in 7s"


@pytest.mark.parametrize(
    "header", ["99999999", "-1", "1e9", "Wed, 21 Oct 2026 07:28:00 GMT", "\x1b[2J"]
)
def test_a_retry_after_no_person_should_read_as_is_says_later(header: str) -> None:
    # What another server at the URL puts there is its own: years, a date, escapes.
    for status in (429, 503):
        error = error_for_status(status, {"error": "busy"}, what="GET", retry_after=header)
        assert error.hint == "try again later", error.hint


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"message": "gitlab style"}, "gitlab style"),
        ({"detail": "fastapi style"}, "fastapi style"),
        ("not json", "HTTP 500"),
        (None, "HTTP 500"),
        ({"error": "  "}, "HTTP 500"),
    ],
)
def test_message_from_any_error_body(body: object, expected: str) -> None:
    assert expected in error_for_status(500, body, what="GET /x").message


@pytest.mark.parametrize(
    ("method", "timeout", "warned"),
    [
        ("POST", httpx.ReadTimeout, True),  # sent, not answered: maybe done
        ("POST", httpx.ConnectTimeout, False),  # never reached the server
        ("GET", httpx.ReadTimeout, False),  # a read changes nothing
    ],
)
def test_a_change_not_answered_in_time_may_have_been_made(
    method: str, timeout: type[httpx.TimeoutException], warned: bool
) -> None:
    def never_answers(request: httpx.Request) -> httpx.Response:
        raise timeout("timed out", request=request)

    api = ApiTransport(
        "http://127.0.0.1:9", no_auth=True, timeout=1, transport=httpx.MockTransport(never_answers)
    )
    with pytest.raises(ServerUnreachable) as caught:
        api.request(method, "/api/work-items/task", json={} if method == "POST" else None)
    assert "did not answer" in caught.value.message
    assert ("may have been done" in (caught.value.hint or "")) is warned


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        # The server's words already say what happened: not said twice.
        (404, {"error": "work item 1f0c not found"}, "work item 1f0c not found"),
        (403, {"error": "Permission denied: retry on mr"}, "Permission denied: retry on mr"),
        # They say only that: the request says what was not found.
        (404, {"detail": "Not Found"}, "not found: GET /api/pools/x"),
        # They say something else: the label first.
        (404, {"error": "no such project"}, "not found: no such project"),
        (409, {"error": "item is active"}, "conflict: item is active"),
    ],
)
def test_the_label_is_said_once(status: int, body: object, message: str) -> None:
    assert error_for_status(status, body, what="GET /api/pools/x").message == message
