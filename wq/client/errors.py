"""Typed client errors, each with the exit code the CLI uses for it.

Exit codes (scripts rely on them): 0 ok, 1 failure, 2 usage or a request the server
found invalid, 3 not found, 4 authentication or permission, 5 conflict or refused.
"""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_AUTH = 4
EXIT_CONFLICT = 5


class ClientError(Exception):
    """An expected failure: one readable line (`message`), an optional hint, an exit code."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, hint: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.status = status


class UsageError(ClientError):
    """The command line itself is wrong (a URL without a scheme, a malformed id)."""

    exit_code = EXIT_USAGE


class ServerUnreachable(ClientError):
    """The server could not be reached (refused, DNS, TLS, timeout)."""


class AuthenticationRequired(ClientError):
    """No usable credentials, or the server rejected them (401), or a login failed."""

    exit_code = EXIT_AUTH


class PermissionDenied(ClientError):
    """The caller is known but lacks the permission (403)."""

    exit_code = EXIT_AUTH


class NotFound(ClientError):
    """The item, project or path does not exist (404)."""

    exit_code = EXIT_NOT_FOUND


class Conflict(ClientError):
    """The server refused because of the item's state (409)."""

    exit_code = EXIT_CONFLICT


class Refused(ClientError):
    """The server refused for now: rate or capacity limits (429)."""

    exit_code = EXIT_CONFLICT


class InvalidRequest(ClientError):
    """The server rejected the request's content (400, 405, 422)."""

    exit_code = EXIT_USAGE


class ServerError(ClientError):
    """The server failed (5xx) or answered something that is not its API."""


class KerberosUnavailable(AuthenticationRequired):
    """A login needs the `wq[kerberos]` extra, which is not installed."""


def server_message(body: Any, fallback: str) -> str:
    """The message of an error body: `{"error": ...}` (wq), `{"message"|"detail": ...}`."""
    if isinstance(body, dict):
        for key in ("error", "message", "detail"):
            value = body.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return fallback


def labelled(label: str, reason: str, what: str) -> str:
    """`label: reason`, unless the server's reason says it already: then the reason
    alone (`work item X not found`, not `not found: work item X not found`), or, when
    the label is all it says (`Not Found`), the label and the request (`what`)."""
    said = reason.lower()
    if label not in said:
        return f"{label}: {reason}"
    if said.strip(" .!") == label:
        return f"{label}: {what}"
    return reason


def error_for_status(
    status: int, body: Any, *, what: str, retry_after: str | None = None
) -> ClientError:
    """The typed error for an HTTP error status; `what` names the request ("GET /api/...")."""
    reason = server_message(body, f"HTTP {status}")

    def said(label: str) -> str:
        return labelled(label, reason, what)

    if status == 401:
        return AuthenticationRequired(said("not authenticated"), status=status)
    if status == 403:
        return PermissionDenied(said("permission denied"), status=status)
    if status == 404:
        return NotFound(said("not found"), status=status)
    if status == 409:
        return Conflict(said("conflict"), status=status)
    hint = _retry_hint(retry_after)
    if status == 429:
        return Refused(said("refused"), hint=hint, status=status)
    if status in (400, 405, 413, 415, 422):
        return InvalidRequest(said("invalid request"), status=status)
    if status == 503:
        return ServerError(said("service unavailable"), hint=hint, status=status)
    return ServerError(f"server error {status} on {what}: {reason}", status=status)


# The longest wait a hint names in seconds (a wq daemon asks for a few).
MAX_HINTED_SECONDS = 3600


def _retry_hint(retry_after: str | None) -> str | None:
    """The hint of a Retry-After: its seconds when a few, else only "later" (a date, a
    wait of years or a terminal's escapes from another server are not printed)."""
    if not retry_after:
        return None
    if retry_after.isascii() and retry_after.isdigit() and int(retry_after) <= MAX_HINTED_SECONDS:
        return f"try again in {int(retry_after)}s"
    return "try again later"
