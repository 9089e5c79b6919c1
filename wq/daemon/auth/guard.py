"""The checks a request goes through: who is calling, and may it do this.

Plain functions of a Starlette `Request`, so that the FastAPI dependencies in
`wq.daemon.deps` and middleware (which must authenticate before a body is read)
call the same code. Every failure raises a `Refusal` (audited when answered, see
`wq.daemon.auth.audit`); every allow is logged.

Item lookups never tell a caller more than its permissions allow: the permission is
checked on some type before an id is looked up (`authorize_lookup`), and an item of
a type the caller may not read answers exactly like an unknown id (404).
"""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session
from starlette.requests import Request

from wq.daemon.auth.audit import allowed, denied, unauthenticated
from wq.daemon.auth.core import AuthenticationFailed, AuthenticationUnavailable, Principal

_STATE_KEY = "wq_principal"


def authenticated_already(request: Request) -> Principal | None:
    """The caller, when `authenticate_request` ran for this request already (no I/O)."""
    cached = getattr(request.state, _STATE_KEY, None)
    return cached if isinstance(cached, Principal) else None


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authenticated_at_once(request: Request) -> Principal | None:
    """The caller, when it is known without I/O (`Authenticator.known`); else None,
    and `authenticate_request` decides (and words any refusal)."""
    cached = authenticated_already(request)
    if cached is not None:
        return cached
    token = _bearer(request)
    if token is None:
        return None
    principal: Principal | None = request.app.state.runtime.authenticator.known(token)
    if principal is not None:
        setattr(request.state, _STATE_KEY, principal)
    return principal


def authenticate_request(request: Request) -> Principal:
    """The caller of a request, from its `Authorization: Bearer` header alone.

    Reads no body; the result is kept on the request's state, so calling it again
    for the same request (a middleware, then a dependency) authenticates once.
    401 without a valid token, 503 when the token cannot be checked now.
    """
    cached = authenticated_already(request)
    if cached is not None:
        return cached
    token = _bearer(request)
    if token is None:
        raise unauthenticated("a Bearer token is required")
    try:
        principal: Principal = request.app.state.runtime.authenticator.authenticate(token)
    except AuthenticationFailed as err:
        raise unauthenticated(str(err)) from None
    except AuthenticationUnavailable as err:
        raise unauthenticated(str(err), unavailable=True) from None
    setattr(request.state, _STATE_KEY, principal)
    return principal


def lacks(
    principal: Principal, permission: str, item_type: str | None, project: str | None = None
) -> str:
    """Why the caller is refused: the permission it lacks, on what and where."""
    scope = f"on type {item_type!r}" if item_type else "on any type"
    # The project is named to a caller who holds the permission in other projects.
    in_others = project is not None and principal.allows_in_some_project(permission, item_type)
    where = f" in project {project!r}" if in_others else ""
    return f"{principal.identity} lacks the {permission!r} permission {scope}{where}"


def authorize(
    request: Request,
    principal: Principal,
    permission: str,
    item_type: str | None = None,
    *,
    project: str | None = None,
    session: Session | None = None,
) -> None:
    """403 naming the missing permission unless the caller holds it (for the type, if
    given, and the project of the item concerned, if given).

    An allowed state-changing call is audited in `session`'s transaction when given.
    """
    if not principal.allows(permission, item_type, project):
        message = lacks(principal, permission, item_type, project)
        raise denied(principal, permission, item_type, message)
    allowed(request, principal, permission, item_type, session=session)


def authorize_lookup(principal: Principal, permission: str) -> None:
    """Before an item is looked up: 403 unless the permission is held on some type (if
    only in some projects).

    A caller who may not use the permission at all learns nothing about which ids
    exist. The allow itself is logged by `authorize_item`, once the type is known.
    """
    if not principal.allows_in_some_project(permission):
        raise denied(principal, permission, None, lacks(principal, permission, None))


def authorize_item(
    request: Request,
    principal: Principal,
    permission: str,
    item_id: uuid.UUID,
    item_type: str,
    *,
    project: str | None = None,
    session: Session | None = None,
) -> None:
    """The permission on one existing item (of `project`, for grants limited to some
    projects); refused as 404 when the caller may not read it.

    A caller who may read the item's type is told what it lacks (403); to anyone
    else the item does not exist, exactly as an unknown id (the denial is audited).
    """
    if principal.allows(permission, item_type, project):
        allowed(request, principal, permission, item_type, session=session, item_id=item_id)
        return
    if principal.allows("read", item_type):
        message, status = lacks(principal, permission, item_type, project), 403
    else:
        message, status = f"work item {item_id} not found", 404
    raise denied(principal, permission, item_type, message, status=status, item_id=item_id)
