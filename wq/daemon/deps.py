"""FastAPI dependencies: the runtime, sessions, the caller, permission checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from wq.daemon.auth import (
    AuthenticationFailed,
    AuthenticationUnavailable,
    Principal,
    denied,
    unauthenticated,
)
from wq.daemon.runtime import Runtime

_bearer = HTTPBearer(auto_error=False, description="A wq Bearer token")

# PostgreSQL text cannot hold NUL: refuse it as bad input rather than fail in the driver.
NO_NUL = r"^[^\x00]*$"


def get_runtime(request: Request) -> Runtime:
    """The daemon's runtime."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    """A session for a state-changing request; committed by the handler."""
    with runtime.sessions() as session:
        yield session


def get_read_session(runtime: RuntimeDep) -> Iterator[Session]:
    """A session for reads (never waits for a writer on SQLite)."""
    with runtime.read_sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
ReadSessionDep = Annotated[Session, Depends(get_read_session)]


def get_principal(
    runtime: RuntimeDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The authenticated caller; 401 without a valid Bearer token, 503 when unverifiable.

    Failures are audited (see `wq.daemon.auth.audit`).
    """
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise unauthenticated("a Bearer token is required")
    try:
        return runtime.authenticator.authenticate(credentials.credentials)
    except AuthenticationFailed as err:
        raise unauthenticated(str(err)) from None
    except AuthenticationUnavailable as err:
        raise unauthenticated(str(err), unavailable=True) from None


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def forbid_unless(principal: Principal, permission: str, item_type: str | None = None) -> None:
    """403 naming the missing permission unless the caller has it (audited)."""
    if not principal.allows(permission, item_type):
        scope = f"on type {item_type!r}" if item_type else "on any type"
        raise denied(
            principal.identity,
            principal.tier,
            permission,
            item_type,
            f"{principal.identity} lacks the {permission!r} permission {scope}",
        )


def require(permission: str, item_type: str | None = None) -> Callable[..., Principal]:
    """A dependency: the caller, who must hold `permission` (for `item_type`, if given)."""

    def check(principal: PrincipalDep) -> Principal:
        forbid_unless(principal, permission, item_type)
        return principal

    return check
