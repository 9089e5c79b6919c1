"""The REST plumbing: errors as GitLab shapes them, the request context, routes, parsing."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.gitlab.state import Project, Token

INJECTED_BODIES: dict[int, Any] = {
    400: {"message": "400 Bad request"},
    401: {"message": "401 Unauthorized"},
    403: {"message": "403 Forbidden"},
    404: {"message": "404 Not Found"},
    409: {"message": "409 Conflict"},
    422: {"message": "422 Unprocessable Entity"},
    429: "Retry later\n",
    500: {"message": "500 Internal Server Error"},
    502: "<html><body><h1>502 Bad Gateway</h1>GitLab is not responding.</body></html>\n",
    503: "<html><body><h1>503 Service Unavailable</h1></body></html>\n",
    504: "<html><body><h1>504 Gateway Time-out</h1></body></html>\n",
}


class ApiError(Exception):
    """An error answer: status, JSON (or text) body and extra headers."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}


def message_error(status: int, message: Any) -> ApiError:
    """A domain error as GitLab shapes it: `{"message": ...}`."""
    return ApiError(status, {"message": message})


def param_error(message: str) -> ApiError:
    """A parameter validation error (Grape): 400 `{"error": ...}`."""
    return ApiError(400, {"error": message})


def not_found(what: str) -> ApiError:
    """GitLab's 404 for a missing thing, e.g. "404 Branch Not Found"."""
    return message_error(404, f"404 {what} Not Found")


@dataclass
class LoggedRequest:
    """One request as the fake saw it; token header values are redacted."""

    method: str
    path: str  # as sent, still percent-encoded, without the query string
    query: dict[str, Any]
    json: Any
    headers: dict[str, str]
    status: int = 0
    injected: bool = False


@dataclass
class Ctx:
    """One request as a handler sees it: parameters, token, route arguments, project."""

    method: str
    raw_path: str
    query: dict[str, Any]
    params: dict[str, Any]
    token: Token
    args: dict[str, str]
    project: Project | None = None

    def get(self, name: str, default: Any = None) -> Any:
        """A parameter (query or body), `default` when absent or null."""
        value = self.params.get(name, default)
        return default if value is None else value

    def require(self, name: str) -> Any:
        """A required parameter; 400 when missing or empty, as Grape answers."""
        value = self.params.get(name)
        if value is None:
            raise param_error(f"{name} is missing")
        if isinstance(value, str | list) and not value:
            raise param_error(f"{name} is empty")
        return value

    def flag(self, name: str, default: bool | None = None) -> bool | None:
        """A boolean parameter as Grape coerces it; 400 when not a boolean."""
        value = self.params.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "t"):
            return True
        if text in ("false", "0", "no", "f"):
            return False
        raise param_error(f"{name} is invalid")

    def integer(self, name: str, default: int | None = None) -> int | None:
        """An integer parameter; 400 when not an integer."""
        value = self.params.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise param_error(f"{name} is invalid") from None

    def arg_int(self, name: str) -> int:
        """An integer route argument (an iid, an id); 400 when not one."""
        try:
            return int(self.args[name])
        except ValueError:
            raise param_error(f"{name} is invalid") from None

    @property
    def proj(self) -> Project:
        """The project the route names (only for project routes)."""
        assert self.project is not None
        return self.project


Response = tuple[int, Any, dict[str, str]]
Handler = Callable[[Any, Ctx], Response]
ROUTES: list[tuple[str, tuple[str, ...], Handler]] = []


def route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    """Register the decorated handler for `method` and a `a/:arg/b` pattern."""

    def register(handler: Handler) -> Handler:
        ROUTES.append((method, tuple(pattern.split("/")), handler))
        return handler

    return register


def ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A successful answer."""
    return status, body, headers or {}


SECRET_HEADERS = frozenset({"private-token", "authorization", "job-token"})


def match_route(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    """The route arguments when `segments` match `pattern`, else None."""
    if len(pattern) != len(segments):
        return None
    args: dict[str, str] = {}
    for expected, actual in zip(pattern, segments, strict=True):
        if expected.startswith(":"):
            if not actual:
                return None
            args[expected[1:]] = actual
        elif expected != actual:
            return None
    return args


def parse_query(query: str) -> dict[str, Any]:
    """A query string as a dict; `key[]` keys become lists."""
    parsed: dict[str, Any] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        if key.endswith("[]"):
            parsed[key[:-2]] = values
        else:
            parsed[key] = values[-1]
    return parsed


def parse_body(content_type: str, body: bytes) -> Any:
    """A JSON or form body; 400 for a JSON body that does not parse."""
    if not body:
        return None
    if "application/x-www-form-urlencoded" in content_type:
        return parse_query(body.decode())
    if "json" in content_type or body[:1] in (b"{", b"["):
        try:
            return json.loads(body)
        except ValueError:
            raise ApiError(400, {"error": "The provided content-type is not JSON"}) from None
    return None
