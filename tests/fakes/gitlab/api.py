"""The REST plumbing: errors as GitLab shapes them, the request context, routes, parsing."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.gitlab.state import Project, Token

_INJECTED_BODIES: dict[int, Any] = {
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


def _message(status: int, message: Any) -> ApiError:
    return ApiError(status, {"message": message})


def _param_error(message: str) -> ApiError:
    return ApiError(400, {"error": message})


def _not_found(what: str) -> ApiError:
    return _message(404, f"404 {what} Not Found")


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
class _Ctx:
    method: str
    raw_path: str
    query: dict[str, Any]
    params: dict[str, Any]
    token: Token
    args: dict[str, str]
    project: Project | None = None

    def get(self, name: str, default: Any = None) -> Any:
        value = self.params.get(name, default)
        return default if value is None else value

    def require(self, name: str) -> Any:
        value = self.params.get(name)
        if value is None:
            raise _param_error(f"{name} is missing")
        if isinstance(value, str | list) and not value:
            raise _param_error(f"{name} is empty")
        return value

    def flag(self, name: str, default: bool | None = None) -> bool | None:
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
        raise _param_error(f"{name} is invalid")

    def integer(self, name: str, default: int | None = None) -> int | None:
        value = self.params.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise _param_error(f"{name} is invalid") from None

    def arg_int(self, name: str) -> int:
        try:
            return int(self.args[name])
        except ValueError:
            raise _param_error(f"{name} is invalid") from None

    @property
    def proj(self) -> Project:
        assert self.project is not None
        return self.project


_Response = tuple[int, Any, dict[str, str]]
_Handler = Callable[[Any, _Ctx], _Response]
_ROUTES: list[tuple[str, tuple[str, ...], _Handler]] = []


def _route(method: str, pattern: str) -> Callable[[_Handler], _Handler]:
    def register(handler: _Handler) -> _Handler:
        _ROUTES.append((method, tuple(pattern.split("/")), handler))
        return handler

    return register


def _ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> _Response:
    return status, body, headers or {}


_SECRET_HEADERS = frozenset({"private-token", "authorization", "job-token"})


def _match(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
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


def _parse_query(query: str) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        if key.endswith("[]"):
            parsed[key[:-2]] = values
        else:
            parsed[key] = values[-1]
    return parsed


def _parse_body(content_type: str, body: bytes) -> Any:
    if not body:
        return None
    if "application/x-www-form-urlencoded" in content_type:
        return _parse_query(body.decode())
    if "json" in content_type or body[:1] in (b"{", b"["):
        try:
            return json.loads(body)
        except ValueError:
            raise ApiError(400, {"error": "The provided content-type is not JSON"}) from None
    return None
