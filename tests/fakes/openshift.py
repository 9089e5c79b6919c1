"""A fake OpenShift API serving `GET /apis/user.openshift.io/v1/users/~` on loopback.

Users are added with their groups and a token; the fake answers with the user
object OpenShift returns (`metadata.name`, `groups`), 401 with a `Status` for an
unknown or revoked token, and whatever `fail_next` injects::

    with FakeOpenShift() as api:
        token = api.add_user("alice", groups=["admins"])
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.loopback import LoopbackServer, Request, Response

USERS_TILDE = "/apis/user.openshift.io/v1/users/~"

__all__ = ["USERS_TILDE", "FakeOpenShift", "fake_openshift"]


def _status(code: int, reason: str, message: str) -> dict[str, object]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeOpenShift(LoopbackServer):
    """The `users/~` endpoint of an OpenShift API server."""

    name = "fake-openshift"

    def __init__(self, *, tls_dir: Path | None = None) -> None:
        super().__init__(tls_dir=tls_dir)
        self.tokens: dict[str, tuple[str, list[str] | None]] = {}

    def add_user(
        self, name: str, groups: list[str] | None = None, *, token: str | None = None
    ) -> str:
        """Register a user and return its token (`groups=None` answers `groups: null`)."""
        token = token or f"sha256~{secrets.token_urlsafe(24)}"
        with self._lock:
            self.tokens[token] = (name, groups)
        return token

    def revoke(self, token: str) -> None:
        with self._lock:
            self.tokens.pop(token, None)

    @property
    def lookups(self) -> int:
        return self.count(USERS_TILDE)

    def handle(self, request: Request) -> Response:
        if request.path != USERS_TILDE:
            return 404, _status(404, "NotFound", "the server could not find the resource"), {}
        if request.method != "GET":
            return 405, _status(405, "MethodNotAllowed", "method not allowed"), {}
        with self._lock:
            user = self.tokens.get(request.bearer or "")
        if user is None:
            return 401, _status(401, "Unauthorized", "Unauthorized"), {}
        name, groups = user
        return (
            200,
            {
                "kind": "User",
                "apiVersion": "user.openshift.io/v1",
                "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
                "identities": [f"htpasswd:{name}"],
                "groups": groups,
            },
            {},
        )


@pytest.fixture
def fake_openshift() -> Iterator[FakeOpenShift]:
    """A started fake OpenShift API with no users; stopped after the test."""
    with FakeOpenShift() as api:
        assert isinstance(api, FakeOpenShift)
        yield api
