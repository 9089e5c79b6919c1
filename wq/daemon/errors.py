"""JSON errors with a readable message: bad input is a 4xx, never a 500."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from wq.daemon.contract import ErrorBody
from wq.daemon.outage import RETRY_AFTER_SECONDS, OutageLog, OutageWatch
from wq.engine.items import ItemConflict, ItemNotFound
from wq.engine.outage import UNAVAILABLE_ERRORS, is_schema_missing
from wq.engine.registry import SubmissionRejected

log = logging.getLogger(__name__)


# Problems a 422 lists at most: one per field of a huge body would be a huge answer.
MAX_PROBLEMS = 20


def _error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    problems: list[str] | None = None,
) -> JSONResponse:
    body = ErrorBody(error=message, problems=problems).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=status, headers=headers)


def unavailable() -> JSONResponse:
    """503 for a database that cannot be used right now."""
    return _error(
        503,
        "the database is unavailable; try again shortly",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


# What a parameter's pattern asks for, in words: a caller is not told a regex.
PATTERN_WORDS: dict[str, str] = {r"^[^\x00]*$": "must not contain NUL (\\u0000)"}


def say_pattern(pattern: str, words: str) -> str:
    """Register how to say what `pattern` asks for (`_said`); returns the pattern."""
    PATTERN_WORDS[pattern] = words
    return pattern


def _said(err: Mapping[str, Any]) -> str:
    """A validation error in the caller's terms.

    Pydantic says "Value should have at most 512 items after validation" of a string
    whose type has a validator of its own (a project path): a text's length is counted
    in characters. A pattern registered with `say_pattern` is said in its words, and a
    validator's own reason without pydantic's "Value error, ".
    """
    ctx = err.get("ctx") or {}
    kind = str(err.get("type")).removeprefix("string_")
    if isinstance(err.get("input"), str) and kind in ("too_long", "too_short"):
        if kind == "too_long" and "max_length" in ctx:
            return f"at most {ctx['max_length']} characters (got {len(err['input'])})"
        if kind == "too_short" and "min_length" in ctx:
            least = ctx["min_length"]
            return "must not be empty" if least == 1 else f"at least {least} characters"
    if err.get("type") == "string_pattern_mismatch" and ctx.get("pattern") in PATTERN_WORDS:
        return PATTERN_WORDS[ctx["pattern"]]
    return str(err.get("msg")).removeprefix("Value error, ")


# Pydantic's error types for a body that is JSON but not an object.
_NOT_AN_OBJECT = ("model_attributes_type", "model_type", "dict_type")


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words ("an array", "a string", ...)."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else "an object"


def install_error_handlers(app: FastAPI, outage: OutageLog) -> None:
    """Turn every error into `{"error": message}` with the right status code."""

    async def database_unavailable(_: Request, exc: Exception) -> JSONResponse:
        # Not a bug: one log line per outage (OutageLog), no traceback per request.
        outage.failed(exc)
        return unavailable()

    for error in UNAVAILABLE_ERRORS:
        app.add_exception_handler(error, database_unavailable)

    @app.exception_handler(sa_exc.ProgrammingError)
    async def schema_missing(request: Request, exc: Exception) -> JSONResponse:
        if not is_schema_missing(exc):
            return await unexpected(request, exc)
        outage.failed(exc)
        return _error(
            503,
            "the database has no wq schema (or an older one): run `wq db migrate`",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    app.add_middleware(OutageWatch, outage=outage)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        errors = exc.errors()
        undecodable = [err for err in errors if err.get("type") == "json_invalid"]
        if undecodable:
            # A body that is not JSON at all is a 400; 422 is for JSON that fails validation.
            reason = undecodable[0].get("ctx", {}).get("error") or undecodable[0].get("msg")
            return _error(400, f"the body is not valid JSON: {reason}")
        if any(err.get("loc") == ("body",) and err.get("type") == "missing" for err in errors):
            # No body at all: nothing to decode (a 400 as for a body that is not JSON).
            return _error(400, "the request has no body: a JSON object is expected")
        for err in errors:
            if err.get("loc") == ("body",) and err.get("type") in _NOT_AN_OBJECT:
                problems.append(
                    f"the body must be a JSON object, not {_json_kind(err.get('input'))}"
                )
                continue
            where = ".".join(str(part) for part in err.get("loc", ()) if part != "body")
            said = _said(err)
            problems.append(f"{where}: {said}" if where else said)
        if len(problems) > MAX_PROBLEMS:
            left = len(problems) - MAX_PROBLEMS
            problems = [*problems[:MAX_PROBLEMS], f"... and {left:,} more problems"]
        return _error(422, "; ".join(problems) or "invalid request", problems=problems)

    @app.exception_handler(ItemNotFound)
    async def not_found(_: Request, exc: ItemNotFound) -> JSONResponse:
        return _error(404, f"work item {exc} not found")

    @app.exception_handler(ItemConflict)
    async def conflict(_: Request, exc: ItemConflict) -> JSONResponse:
        return _error(409, str(exc))

    @app.exception_handler(SubmissionRejected)
    async def rejected(_: Request, exc: SubmissionRejected) -> JSONResponse:
        return _error(422, str(exc), problems=[str(exc)])

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return _error(500, "internal error; the daemon's log has the details")
