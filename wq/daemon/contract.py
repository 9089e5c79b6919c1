"""The error answers of the API as the OpenAPI document states them.

Every error the daemon gives has the same body, `ErrorBody`; `error_responses`
builds the `responses=` of a route from the statuses that route can really give,
with that schema, a description per status and the headers that come with it
(`WWW-Authenticate` on 401, `Retry-After` on 503). The route groups below say which
statuses each kind of route can give, so that a route cannot forget the ones every
route of its kind shares (431 everywhere, 401/403/503 under /api/, 413/415 with a
body).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from wq.daemon.outage import RETRY_AFTER_SECONDS


class ErrorBody(BaseModel):
    """The body of every error answer: one readable line, and the field problems of a 422."""

    error: str = Field(description="what went wrong, in one line")
    problems: list[str] | None = Field(
        default=None,
        description="422 for invalid input only: one entry per problem, `where.field: reason`",
    )


DESCRIPTIONS: dict[int, str] = {
    400: "the body cannot be used: not decodable, not JSON, or not what this endpoint takes",
    401: "no valid Bearer token (or webhook secret)",
    403: "the caller lacks the permission this route needs (the message names it)",
    404: "no such item (or one of a type the caller may not read), or the endpoint is off",
    408: "the request body did not arrive in full within server.body_timeout_seconds",
    409: "the item is not in a state that allows this (the message says which it is in)",
    413: "the request body is over server.max_body_bytes",
    415: "a request body that is not application/json",
    422: "invalid input: `problems` names each parameter or field and why",
    429: "not enqueued: the project's limit of queued autonomous items is reached; or, "
    "with Retry-After, the caller is already sending its share of request bodies "
    "(a quarter of the requests the daemon lets in)",
    431: "the request headers are over 256 KiB",
    503: "the database (or the token's issuer) cannot be reached now, or the daemon is "
    "overloaded; retry after Retry-After",
}

RETRY_AFTER_HEADER: dict[str, Any] = {
    "description": "seconds to wait before retrying",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9]+$", "example": str(RETRY_AFTER_SECONDS)},
}
HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "the Bearer challenge (not sent for a wrong webhook secret)",
            "schema": {"type": "string", "example": "Bearer"},
        }
    },
    429: {"Retry-After": {**RETRY_AFTER_HEADER, "required": False}},
    503: {"Retry-After": RETRY_AFTER_HEADER},
}

# What each kind of route can answer besides its successes.
ANY_ROUTE = (431,)
API_ROUTE = (*ANY_ROUTE, 401, 403, 503)  # a Bearer token, a permission, the database
WITH_PARAMETERS = (422,)
# BodyGuard: not JSON, too slow, the size limit, the caller's share, the JSON media type
WITH_BODY = (400, 408, 413, 415, 429)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entries of these error statuses, each with `ErrorBody`."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in sorted(set(statuses)):
        entry: dict[str, Any] = {"model": ErrorBody, "description": DESCRIPTIONS[status]}
        if status in HEADERS:
            entry["headers"] = HEADERS[status]
        responses[status] = entry
    return responses


def api_responses(*extra: int, body: bool = False) -> dict[int | str, dict[str, Any]]:
    """The error responses of an /api/ route: the shared ones, 422, and `extra`.

    `body=True` for a route that takes a request body (POST): 408, 413 and 415 too.
    """
    return error_responses(*API_ROUTE, *WITH_PARAMETERS, *(WITH_BODY if body else ()), *extra)
