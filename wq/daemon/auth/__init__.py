"""Authentication and authorization of the HTTP API.

A Bearer token goes through the tiers of an `Authenticator` in turn: the embedded
daemon's local token (`core.LocalTokenTier`), JWTs from the issuers the rules name
(`jwt_tier`, keys from `oidc`), OpenShift `users/~` (`openshift_tier`). `rules`
turns the caller's groups or claims into a `Principal` with permissions per item
type; `config` validates the `authorization:` section and `setup` builds the tiers
from it; `audit` answers and records refusals. Code outside this package imports
from here.
"""

from wq.daemon.auth.audit import Refusal, denied, install_auth_handling, unauthenticated
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
    "build_authenticator",
    "denied",
    "install_auth_handling",
    "parse_authorization",
    "unauthenticated",
]
