"""Every HTTP error status maps to one typed error, one line, and its exit code."""

from __future__ import annotations

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
    error_for_status,
)


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
