"""Authentication and authorization of the HTTP API.

A Bearer token goes through the tiers of an `Authenticator` in turn: the embedded
daemon's local token (`core.LocalTokenTier`), JWTs from the issuers the rules name
(`jwt_tier`, keys from `oidc`), OpenShift `users/~` (`openshift_tier`). `rules`
turns the caller's groups or claims into a `Principal` with permissions per item
type; `config` validates the `authorization:` section and `setup` builds the tiers
from it. `guard` authenticates a request from its headers and authorizes it;
`audit` logs every decision, records refusals and state-changing allows, and
answers refusals. Code outside this package imports from here.
"""

from wq.daemon.auth.audit import (
    Refusal,
    allowed,
    allowed_record,
    answer_refusal,
    audit_allowed,
    denied,
    install_auth_handling,
    log_decision,
    unauthenticated,
    webhook_refused,
)
from wq.daemon.auth.config import parse_authorization
from wq.daemon.auth.core import (
    ALL_TYPES,
    PERMISSIONS,
    AuthenticationFailed,
    AuthenticationUnavailable,
    Authenticator,
    LocalTokenTier,
    Principal,
)
from wq.daemon.auth.guard import (
    authenticate_request,
    authenticated_already,
    authenticated_at_once,
    authorize,
    authorize_item,
    authorize_lookup,
    lacks,
)
from wq.daemon.auth.setup import build_authenticator

__all__ = [
    "ALL_TYPES",
    "PERMISSIONS",
    "AuthenticationFailed",
    "AuthenticationUnavailable",
    "Authenticator",
    "LocalTokenTier",
    "Principal",
    "Refusal",
    "allowed",
    "allowed_record",
    "answer_refusal",
    "audit_allowed",
    "authenticate_request",
    "authenticated_already",
    "authenticated_at_once",
    "authorize",
    "authorize_item",
    "authorize_lookup",
    "build_authenticator",
    "denied",
    "install_auth_handling",
    "lacks",
    "log_decision",
    "parse_authorization",
    "unauthenticated",
    "webhook_refused",
]
