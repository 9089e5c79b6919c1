"""Authentication tiers and the permission model of the HTTP API.

A tier turns a Bearer token into a `Principal` or declines it. The foundation has
one tier, the local-only token of the embedded daemon; the rules engine (OpenShift,
JWT) adds tiers behind the same `Authenticator`.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

PERMISSIONS = ("read", "retry", "submit")
ALL_TYPES = "*"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller and what it may do, per item type (`*` for all)."""

    identity: str
    tier: str
    permissions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    groups: Sequence[str] = ()

    def allows(self, permission: str, item_type: str | None = None) -> bool:
        """True when the permission is granted for the type (or for every type)."""
        if permission in self.permissions.get(ALL_TYPES, frozenset()):
            return True
        if item_type is None:
            return any(permission in granted for granted in self.permissions.values())
        return permission in self.permissions.get(item_type, frozenset())


class AuthenticationFailed(Exception):
    """The token was presented but is not valid."""


class Tier(Protocol):
    """One way of validating Bearer tokens."""

    def authenticate(self, token: str) -> Principal | None:
        """A principal, None when this tier does not know the token, or raise."""


class LocalTokenTier:
    """The embedded daemon's random local-only token, granted every permission."""

    name = "local"

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)

    def authenticate(self, token: str) -> Principal | None:
        """Accept exactly the local token (constant-time comparison)."""
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return Principal(
                identity="local",
                tier=self.name,
                permissions={ALL_TYPES: frozenset(PERMISSIONS)},
            )
        return None


class Authenticator:
    """Tries each tier in order; a token no tier knows is rejected."""

    def __init__(self, tiers: Sequence[Tier]) -> None:
        self.tiers = list(tiers)

    def authenticate(self, token: str) -> Principal:
        """The principal of a token, or AuthenticationFailed."""
        for tier in self.tiers:
            principal = tier.authenticate(token)
            if principal is not None:
                return principal
        raise AuthenticationFailed("the token is not valid for this server")
