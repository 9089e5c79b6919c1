"""FastAPI dependencies: the runtime, sessions, the caller, permission checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from wq.daemon.auth import Principal, authenticate_request, authorize
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
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The authenticated caller; 401 without a valid Bearer token, 503 when unverifiable.

    Failures are audited (see `wq.daemon.auth.audit`). The `_bearer` parameter only
    declares the scheme in OpenAPI: the header is read by `authenticate_request`.
    """
    return authenticate_request(request)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require(permission: str, item_type: str | None = None) -> Callable[..., Principal]:
    """A dependency: the caller, who must hold `permission` (for `item_type`, if given).

    The decision is logged; on a state-changing route the allow is audited in the
    request's session, so it commits with the change (the handler's `SessionDep`).
    """

    def check(request: Request, principal: PrincipalDep, session: SessionDep) -> Principal:
        authorize(request, principal, permission, item_type, session=session)
        return principal

    return check
