"""FastAPI dependencies: the runtime, sessions, the caller, permission checks.

Each sync dependency costs a hop to the threadpool and back (and, under load, a wait
for the GIL on each side), so the ones that do no I/O are `async`: the runtime, the
sessions (a session connects only at its first statement, in the endpoint's thread),
the caller when it is known without I/O (the body guard authenticated it already, or
its token is the local one or a cached one: `Authenticator.known`), and the
permission checks (an allow is audited into the session's pending commit, or by the
handler: `require`). A session is closed in the threadpool only when it still holds a
connection; read endpoints close theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, StringConstraints
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from wq.daemon.auth import (
    Principal,
    allowed_record,
    audit_allowed,
    authenticate_request,
    authenticated_at_once,
    authorize,
)
from wq.daemon.auth.audit import SAFE_METHODS
from wq.daemon.runtime import Runtime
from wq.engine.audit import AuditRecord
from wq.engine.project_names import canonical_project

_bearer = HTTPBearer(auto_error=False, description="A wq Bearer token")

# PostgreSQL text cannot hold NUL: refuse it as bad input rather than fail in the driver.
NO_NUL = r"^[^\x00]*$"
# A project a filter names, matched as projects are stored (`canonical_project`). The
# pattern is the type's own: given only beside it (`Query(pattern=...)`), it is enforced
# but left out of the OpenAPI document when the parameter may be null.
ProjectName = Annotated[str, StringConstraints(pattern=NO_NUL), AfterValidator(canonical_project)]


async def get_runtime(request: Request) -> Runtime:
    """The daemon's runtime."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@asynccontextmanager
async def _session(factory: sessionmaker[Session]) -> AsyncIterator[Session]:
    session = factory()
    try:
        yield session
    finally:
        # Closing returns the connection (a rollback: I/O), so off the event loop; and
        # off the request threads too, on the loop's own executor: the transaction may
        # hold a lock (SQLite's one write lock, a row) that every request thread is
        # waiting for, and then none would ever be free to end it. A session that never
        # connected, or was closed already, has nothing to do.
        if session.in_transaction():
            await asyncio.get_running_loop().run_in_executor(None, session.close)
        else:
            session.close()


async def get_session(runtime: RuntimeDep) -> AsyncIterator[Session]:
    """A session for a state-changing request; committed by the handler."""
    async with _session(runtime.sessions) as session:
        yield session


def read_sessions(request: Request) -> sessionmaker[Session]:
    """Sessions for reads (autocommit on PostgreSQL; never waiting for a writer on SQLite)."""
    runtime: Runtime = request.app.state.runtime
    return runtime.api_read_sessions or runtime.read_sessions


async def get_read_session(request: Request) -> AsyncIterator[Session]:
    """A session for reads (`read_sessions`)."""
    async with _session(read_sessions(request)) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
ReadSessionDep = Annotated[Session, Depends(get_read_session)]


async def get_principal(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The authenticated caller; 401 without a valid Bearer token, 503 when unverifiable.

    Failures are audited (see `wq.daemon.auth.audit`). The `_bearer` parameter only
    declares the scheme in OpenAPI: the header is read by `authenticate_request`.
    A tier may call out (OIDC keys, OpenShift), so it runs in the threadpool unless
    the caller is known without I/O.
    """
    known = authenticated_at_once(request)
    if known is not None:
        return known
    return await run_in_threadpool(authenticate_request, request)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


@dataclass(frozen=True)
class Permit:
    """A caller allowed a state-changing call; its handler audits the allow (`audit`)."""

    request: Request
    principal: Principal
    permission: str
    item_type: str | None
    # Granted in some projects only: the handler checks the project (`check_project`).
    in_some_projects: bool = False

    def check_project(self, project: str) -> None:
        """403 unless the permission covers this project (a rule limited to projects)."""
        if self.in_some_projects:
            authorize(
                self.request, self.principal, self.permission, self.item_type, project=project
            )

    @property
    def runtime(self) -> Runtime:
        """The daemon's runtime."""
        runtime: Runtime = self.request.app.state.runtime
        return runtime

    def audit(self, session: Session) -> None:
        """Audit the allow in `session`, so that it commits with the change it allowed."""
        audit_allowed(
            self.request, self.principal, self.permission, self.item_type, session=session
        )

    def record(self) -> AuditRecord | None:
        """The allow's audit entry, for a handler that writes it without a session."""
        return allowed_record(self.request, self.principal, self.permission, self.item_type)


def require(permission: str, item_type: str | None = None) -> Callable[..., Awaitable[Permit]]:
    """A dependency for state-changing routes: the caller, who must hold `permission`
    (for `item_type`, if given), as a `Permit`.

    The decision is logged here, before the body is validated (a caller without the
    permission is refused whatever it sent), unless the caller holds it in some
    projects only: then the handler checks the body's project (`Permit.check_project`).
    The handler audits the allow in the session it commits (`Permit.audit`). One
    dependency: the caller is authenticated here too (each dependency costs FastAPI's
    resolution on the event loop, and a session's generator two context managers), and
    the handler opens its session in its own thread.
    """

    async def check(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Permit:
        principal = authenticated_at_once(request)
        if principal is None:
            principal = await run_in_threadpool(authenticate_request, request)
        if not principal.allows(permission, item_type) and principal.allows_in_some_project(
            permission, item_type
        ):
            return Permit(request, principal, permission, item_type, in_some_projects=True)
        authorize(request, principal, permission, item_type)
        return Permit(request, principal, permission, item_type)

    return check


def require_to_read(permission: str = "read") -> Callable[..., Awaitable[Principal]]:
    """`require` for routes that change nothing (GET): no session, the decision logged.

    A state-changing request through it is refused (500) rather than left unaudited.
    """

    async def check(request: Request, principal: PrincipalDep) -> Principal:
        if request.method not in SAFE_METHODS:
            raise RuntimeError(f"{request.method} {request.url.path}: its allow would go unaudited")
        authorize(request, principal, permission)
        return principal

    return check
