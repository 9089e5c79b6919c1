"""The JWT tier: Bearer tokens signed by an issuer that the rules name.

The token's `iss` is read without verification only to pick the configured issuer;
everything else is verified with PyJWT against that issuer's published keys and a
fixed allow-list of asymmetric algorithms (the token's own `alg` must be on the list
and fit the key; `none` and HMAC never are): the signature, `iss`, `exp` (required)
and `nbf` with a small leeway, and `aud`, which must be one the rules of the issuer
accept (compared case-insensitively, like every claim). The verified claims then go
through the rules; the identity is the `sub` claim.

A token that is not a JWT, or whose issuer no rule names, is left to the next tier
(OpenShift, which validates cluster tokens itself) or, when this is the last tier,
rejected with a message naming the issuer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import jwt
from jwt import exceptions as jwt_errors

from wq.daemon.auth.config import JwtConfig
from wq.daemon.auth.core import UNDECIDED, AuthenticationFailed, Principal
from wq.daemon.auth.oidc import KeySource
from wq.daemon.auth.rules import RuleSet, value_set

log = logging.getLogger(__name__)

REQUIRED_CLAIMS = ["exp", "iss"]
TIME_CLAIMS = ("exp", "nbf", "iat")


def peek(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The unverified header and payload of a JWT; None for anything else."""
    if token.count(".") != 2:
        return None
    try:
        header = jwt.get_unverified_header(token)
        payload = jwt.decode(token, options={"verify_signature": False})
    except jwt_errors.PyJWTError:
        return None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        return None
    return header, payload


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."


class JwtTier:
    """Validates JWTs from the issuers the rules name (URLs, or `k8s`)."""

    name = "jwt"

    def __init__(
        self,
        rules: RuleSet,
        sources: Mapping[str, KeySource],
        settings: JwtConfig,
        *,
        last: bool,
        clients: Sequence[httpx.Client] = (),
    ) -> None:
        self.rules = rules
        self.clients = list(clients)
        self.sources = dict(sources)
        self.settings = settings
        self.algorithms = list(settings.algorithms)
        self.last = last

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a valid JWT, None when the token is not for this tier."""
        peeked = peek(token)
        if peeked is None:
            return None
        header, payload = peeked
        iss = payload.get("iss")
        names = self._names_for(iss) if isinstance(iss, str) else []
        if not names:
            if not self.last:
                return None
            shown = _short(iss) if isinstance(iss, str) else None
            raise AuthenticationFailed(f"no rule accepts tokens from issuer {shown!r}")
        assert isinstance(iss, str)
        claims = self._verify(token, header, iss, self.sources[names[0]])
        audiences = self.rules.audiences(names)
        if value_set(claims.get("aud")).isdisjoint(audiences):
            raise AuthenticationFailed("the token's audience (aud) is not one this server accepts")
        subject = claims.get("sub")
        # The subject is who acted in the audit trail: a token must name one. (A long
        # one, such as GitLab CI's with a long branch name, is cut there, not refused.)
        if not isinstance(subject, str) or not subject:
            raise AuthenticationFailed("the token names no subject (sub)")
        return self.rules.for_claims(
            subject, issuer=iss, issuer_names=names, claims=claims, tier=self.name
        )

    def known(self, token: str) -> str | None:
        """None for what is not a JWT (as `authenticate`); a JWT is `UNDECIDED` (its
        issuer's keys may have to be fetched)."""
        return None if peek(token) is None else UNDECIDED

    def close(self) -> None:
        """Close the HTTP clients of the key sources."""
        for client in self.clients:
            client.close()

    def _names_for(self, iss: str) -> list[str]:
        """The configured issuer names (URL or `k8s`) whose issuer is `iss`."""
        names = [name for name, source in self.sources.items() if source.issuer == iss]
        if names:
            return names
        # An issuer discovered at run time (`k8s` in a cluster) may be this one.
        for source in self.sources.values():
            if source.issuer is None:
                source.resolve_issuer()
        return [name for name, source in self.sources.items() if source.issuer == iss]

    def _verify(
        self, token: str, header: dict[str, Any], iss: str, source: KeySource
    ) -> dict[str, Any]:
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise AuthenticationFailed(f"the token's algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise AuthenticationFailed("the token's key id (kid) is not a string")
        key = source.key(kid, alg)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                issuer=iss,
                leeway=self.settings.leeway_seconds,
                options={
                    "require": REQUIRED_CLAIMS,
                    "verify_aud": False,  # checked against the rules, case-insensitively
                    "enforce_minimum_key_length": True,
                },
            )
        except jwt_errors.ExpiredSignatureError:
            raise AuthenticationFailed("the token has expired") from None
        except jwt_errors.ImmatureSignatureError:
            raise AuthenticationFailed("the token is not valid yet (nbf/iat)") from None
        except jwt_errors.InvalidSignatureError:
            raise AuthenticationFailed("the token's signature is not valid") from None
        except jwt_errors.MissingRequiredClaimError as err:
            raise AuthenticationFailed(f"the token has no {err.claim!r} claim") from None
        except jwt_errors.PyJWTError as err:
            raise AuthenticationFailed(f"the token is not valid: {err}") from None
        for name in TIME_CLAIMS:
            # PyJWT takes anything int() takes ("1796000000" too): RFC 7519's NumericDate
            # is a JSON number, and a token that says otherwise was not made with care.
            value = claims.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise AuthenticationFailed(f"the token's {name!r} claim is not a number")
        return claims
