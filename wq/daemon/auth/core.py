"""Authentication tiers and the permission model of the HTTP API.

A tier turns a Bearer token into a `Principal` or declines it (None), so that the
next tier may try. A tier that recognises a token but finds it invalid raises
`AuthenticationFailed` (401); one that cannot reach what it needs to decide raises
`AuthenticationUnavailable` (503). The tiers are the embedded daemon's local token
(`LocalTokenTier`), JWTs from configured issuers (`wq.daemon.auth.jwt_tier`) and
OpenShift `users/~` (`wq.daemon.auth.openshift_tier`); `wq.daemon.auth.setup` builds them.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

PERMISSIONS = ("read", "retry", "submit")
ALL_TYPES = "*"
LOCAL_TIER = "local"
ACTOR_MAX = 255  # the audit_log.actor column
# Real tokens (service-account and CI JWTs, OpenShift tokens) are well under this; a
# longer one is refused before any tier spends a lookup or a signature check on it.
MAX_TOKEN_LENGTH = 8192


@dataclass(frozen=True)
class ProjectGrant:
    """Permissions a rule with `projects` grants: on these types (`*`: all), and only
    on items of these projects or of projects under them."""

    permissions: frozenset[str]
    item_types: frozenset[str]
    projects: tuple[str, ...]

    def covers(self, permission: str, item_type: str | None, project: str | None) -> bool:
        """Whether it grants the permission on the type (any type: None) in the
        project (some project: None)."""
        if permission not in self.permissions:
            return False
        if item_type is not None and not ({item_type, ALL_TYPES} & self.item_types):
            return False
        return project is None or any(
            project == name or project.startswith(f"{name}/") for name in self.projects
        )


@dataclass(frozen=True)
class Principal:
    """An authenticated caller and what it may do, per item type (`*` for all).

    `claims` holds the claims of a JWT that matter to the rules (for whoami), `rules`
    the public form of the rules that matched (for whoami and the audit trail).
    `project_grants` are the permissions granted on some projects only: they count
    where the item's project is known (`allows(..., project=...)`), nowhere else.
    """

    identity: str
    tier: str
    permissions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    project_grants: Sequence[ProjectGrant] = ()
    groups: Sequence[str] = ()
    issuer: str | None = None
    claims: Mapping[str, Any] = field(default_factory=dict)
    rules: Sequence[Mapping[str, Any]] = ()

    @property
    def actor(self) -> str:
        """Who acted, for the audit trail: the identity qualified by its tier.

        `local` for the local token, `ocp:<user>` for OpenShift users and
        `jwt:<issuer>#<sub>` for JWTs, so that no caller can pass for the engine
        (`system`) or for another tier by choosing its name. Bounded like the column.
        """
        if self.tier == LOCAL_TIER:
            return LOCAL_TIER
        if self.issuer is not None:
            subject = self.claims.get("sub")
            actor = f"jwt:{self.issuer}#{subject if isinstance(subject, str) else ''}"
        else:
            actor = f"ocp:{self.identity}"
        return actor[:ACTOR_MAX]

    def types_with(self, permission: str) -> set[str] | None:
        """The item types the permission is granted on; None means every type."""
        if permission in self.permissions.get(ALL_TYPES, frozenset()):
            return None
        return {name for name, granted in self.permissions.items() if permission in granted}

    def allows(
        self, permission: str, item_type: str | None = None, project: str | None = None
    ) -> bool:
        """True when the permission is granted for the type (or for every type).

        Without `type`: on some type. Grants limited to some projects count only for
        an item whose `project` is given.
        """
        if permission in self.permissions.get(ALL_TYPES, frozenset()):
            return True
        if item_type is None:
            granted = any(permission in held for held in self.permissions.values())
        else:
            granted = permission in self.permissions.get(item_type, frozenset())
        return granted or (
            project is not None
            and any(grant.covers(permission, item_type, project) for grant in self.project_grants)
        )

    def allows_in_some_project(self, permission: str, item_type: str | None = None) -> bool:
        """True when the permission is granted for the type, if only in some projects."""
        return self.allows(permission, item_type) or any(
            grant.covers(permission, item_type, None) for grant in self.project_grants
        )

    def effective_permissions(self, item_types: Sequence[str]) -> dict[str, list[str]]:
        """The sorted permissions held on each of these types (types with none left out)."""
        result = {}
        for name in item_types:
            granted = [p for p in PERMISSIONS if self.allows(p, name)]
            if granted:
                result[name] = granted
        return result


class AuthenticationFailed(Exception):
    """The token was presented but is not valid (401)."""


class AuthenticationUnavailable(Exception):
    """The token cannot be checked right now: its issuer or API is unreachable (503)."""


# What `Tier.known` answers for a token the tier cannot decide on without I/O.
UNDECIDED = "undecided"


class Tier(Protocol):
    """One way of validating Bearer tokens.

    A tier may also have `known(token)`: what `authenticate` would answer, a principal
    or None, when it can tell without I/O (a cache, a comparison); `UNDECIDED` when
    it cannot, or when `authenticate` would raise.
    """

    name: str

    def authenticate(self, token: str) -> Principal | None:
        """A principal, None when this tier does not know the token, or raise."""


class LocalTokenTier:
    """The embedded daemon's random local-only token, granted every permission."""

    name = LOCAL_TIER

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)

    def authenticate(self, token: str) -> Principal | None:
        """Accept exactly the local token (constant-time comparison)."""
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return Principal(
                identity=LOCAL_TIER,
                tier=self.name,
                permissions={ALL_TYPES: frozenset(PERMISSIONS)},
            )
        return None

    def known(self, token: str) -> Principal | None:
        """As `authenticate`: a comparison, no I/O."""
        return self.authenticate(token)


class Authenticator:
    """Tries each tier in order; a token no tier knows is rejected."""

    def __init__(self, tiers: Sequence[Tier]) -> None:
        self.tiers = list(tiers)

    def authenticate(self, token: str) -> Principal:
        """The principal of a token, AuthenticationFailed or AuthenticationUnavailable."""
        if len(token) > MAX_TOKEN_LENGTH:
            raise AuthenticationFailed(f"the token is longer than {MAX_TOKEN_LENGTH} characters")
        for tier in self.tiers:
            principal = tier.authenticate(token)
            if principal is not None:
                return principal
        raise AuthenticationFailed("the token is not valid for this server")

    def known(self, token: str) -> Principal | None:
        """The principal `authenticate` would give, when every tier it asks can tell
        without I/O; None otherwise (then `authenticate`, off the event loop, decides
        and words any refusal)."""
        if len(token) > MAX_TOKEN_LENGTH:
            return None
        for tier in self.tiers:
            known = getattr(tier, "known", None)
            answer = UNDECIDED if known is None else known(token)
            if answer is None:
                continue  # not this tier's token: the next one's turn, as in `authenticate`
            return answer if isinstance(answer, Principal) else None
        return None

    @property
    def tier_names(self) -> list[str]:
        """The names of the tiers, in the order they are tried."""
        return [tier.name for tier in self.tiers]

    def close(self) -> None:
        """Release what the tiers hold (HTTP connection pools)."""
        for tier in self.tiers:
            close = getattr(tier, "close", None)
            if close is not None:
                close()
