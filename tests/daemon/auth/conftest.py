"""Fixtures for the authentication and authorization tests: fakes, a clock, builders."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.oidc import fake_oidc  # noqa: F401 - fixture
from tests.fakes.openshift import fake_openshift  # noqa: F401 - fixture
from wq.daemon.auth import Authenticator, build_authenticator
from wq.engine.config import Config, parse_config

AUD = "wq-service"
KNOWN_TYPES = {"mr", "chain", "task"}


class Clock:
    """A monotonic clock that tests move by hand (no sleeping)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def auth_config(authorization: dict[str, Any] | None, **extra: Any) -> Config:
    """A config whose only interesting part is its authorization section."""
    data: dict[str, Any] = {"database_url": "sqlite:////nonexistent/wq-auth-tests.db", **extra}
    if authorization is not None:
        data["authorization"] = authorization
    return parse_config(data, "test.yml")


def authenticator(
    authorization: dict[str, Any],
    *,
    clock: Clock | None = None,
    environ: dict[str, str] | None = None,
) -> Authenticator:
    """The tiers (no local token) built from an authorization section."""
    return build_authenticator(
        auth_config(authorization),
        known_types=KNOWN_TYPES,
        environ=environ or {},
        clock=clock or Clock(),
    )
