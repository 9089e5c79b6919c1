"""`GET /api/whoami` (who the caller is and what it may do) and `POST /oauth/token`.

`/oauth/token` is the one path where the OAuth proxy's `X-Forwarded-Access-Token`
is read: the proxy fronts it (with the login flow), so a browser or CLI session
cookie becomes a Bearer token for the API. POST only, so that a cross-site GET
(an <img> or <script> tag) cannot trigger it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from wq.daemon.auth import allowed, log_decision, unauthenticated
from wq.daemon.contract import ANY_ROUTE, error_responses
from wq.daemon.deps import PrincipalDep, RuntimeDep

router = APIRouter(tags=["identity"])


class AuthenticationPublic(BaseModel):
    """How the caller authenticated."""

    tier: str
    identity: str
    groups: list[str] | None = None
    issuer: str | None = None
    claims: dict[str, Any] | None = None


class AuthorizationPublic(BaseModel):
    """What the caller may do, and the rules that say so."""

    effective_permissions: dict[str, list[str]]
    matching_rules: list[dict[str, Any]]


class WhoamiPublic(BaseModel):
    """The caller's identity and effective permissions."""

    authentication: AuthenticationPublic
    authorization: AuthorizationPublic


class TokenPublic(BaseModel):
    """A Bearer token for the API."""

    access_token: str
    token_type: str = "Bearer"


@router.get(
    "/api/whoami",
    response_model=WhoamiPublic,
    response_model_exclude_none=True,
    # A valid token is all it needs: no permission (403) and no parameter (422).
    responses=error_responses(*ANY_ROUTE, 401, 503),
)
def read_whoami(request: Request, principal: PrincipalDep, runtime: RuntimeDep) -> WhoamiPublic:
    """The caller's identity, groups or claims, permissions per item type and matching rules.

    Needs a valid token but no permission: a caller with no matching rule sees empty
    permissions here, and 403 everywhere else.
    """
    allowed(request, principal, None)
    jwt = principal.issuer is not None
    return WhoamiPublic(
        authentication=AuthenticationPublic(
            tier=principal.tier,
            identity=principal.identity,
            groups=None if jwt or principal.tier == "local" else list(principal.groups),
            issuer=principal.issuer,
            claims=dict(principal.claims) if jwt else None,
        ),
        authorization=AuthorizationPublic(
            effective_permissions=principal.effective_permissions(runtime.registry.names),
            matching_rules=[dict(rule) for rule in principal.rules],
        ),
    )


@router.post(
    "/oauth/token",
    response_model=TokenPublic,
    responses=error_responses(*ANY_ROUTE, 401, 422),
)
def create_token(
    request: Request,
    x_forwarded_access_token: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """The access token the OAuth proxy forwards for the caller's session."""
    token = (x_forwarded_access_token or "").strip()
    if not token:
        raise unauthenticated(
            "no X-Forwarded-Access-Token: sign in through the OAuth proxy, which fronts this path"
        )
    # Only the proxy's word for now; the token is checked when it is used on /api/.
    log_decision(request, "allow", "oauth-proxy", {"tier": "oauth-proxy"})
    return JSONResponse(
        TokenPublic(access_token=token).model_dump(),
        headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
    )
