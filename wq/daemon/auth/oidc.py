"""One JWT issuer's signing keys: OIDC discovery, then its JWKS, cached for a lifespan.

The discovery document (`{issuer}/.well-known/openid-configuration`) must name
exactly the configured issuer; its `jwks_uri` gives the keys. Keys are cached for
`jwks_lifespan_seconds`; a token naming a key id the cache does not hold triggers
one refetch (at most one per `jwks_refetch_interval_seconds`, so a flood of forged
key ids cannot hammer the issuer). When a refresh fails the keys already held stay
in use (a warning is logged); with no keys at all the caller gets a 503.

Only asymmetric keys are ever used, and only with the algorithm their type supports:
an RSA key verifies RS*/PS*, an EC key the ES* of its curve, an OKP key EdDSA.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from wq.daemon.auth.config import JwtConfig, check_url
from wq.daemon.auth.core import AuthenticationFailed, AuthenticationUnavailable
from wq.daemon.auth.outbound import fetch_json

log = logging.getLogger(__name__)

DISCOVERY_PATH = "/.well-known/openid-configuration"
EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
OKP_CURVES = ("Ed25519", "Ed448")


def discovery_url(issuer: str) -> str:
    """Where an issuer publishes its OIDC discovery document."""
    return issuer.rstrip("/") + DISCOVERY_PATH


def fits(jwk: dict[str, Any], alg: str) -> bool:
    """True when this JWK may verify a signature made with `alg`."""
    if jwk.get("use", "sig") != "sig" or jwk.get("alg", alg) != alg:
        return False
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if alg.startswith(("RS", "PS")):
        return bool(kty == "RSA")
    if alg in EC_CURVES:
        return bool(kty == "EC" and crv == EC_CURVES[alg])
    if alg == "EdDSA":
        return bool(kty == "OKP" and crv in OKP_CURVES)
    return False


class KeySource:
    """The signing keys of one issuer (thread-safe; one fetch at a time)."""

    def __init__(
        self,
        name: str,
        *,
        client: httpx.Client,
        settings: JwtConfig,
        issuer: str | None,
        discovery: str | None = None,
        jwks_url: str | None = None,
        bearer: Callable[[], str | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if issuer is None and discovery is None:
            raise ValueError("a key source needs its issuer or a discovery URL")
        self.name = name
        self._client = client
        self._settings = settings
        self._issuer = issuer
        self._discovery = discovery or discovery_url(issuer or "")
        self._jwks_override = jwks_url
        self._bearer = bearer or (lambda: None)
        self._clock = clock
        self._lock = threading.Lock()
        self._jwks_uri: str | None = None
        self._keys: list[dict[str, Any]] = []
        self._prepared: dict[tuple[int, str], PyJWK] = {}
        self._next_refresh: float | None = None
        self._discovered_at: float | None = None
        self._last_jwks_fetch: float | None = None
        self.fetches = 0  # JWKS fetches, for tests and debugging

    @property
    def issuer(self) -> str | None:
        """The issuer URL, once configured or discovered."""
        return self._issuer

    def resolve_issuer(self) -> str:
        """The issuer URL, discovering it first when only the discovery URL is known."""
        with self._lock:
            if self._issuer is None:
                self._discover()
            assert self._issuer is not None
            return self._issuer

    def key(self, kid: str | None, alg: str) -> PyJWK:
        """The key that verifies a token signed with `alg` by key `kid`, or raise."""
        with self._lock:
            now = self._clock()
            if self._next_refresh is None or now >= self._next_refresh:
                self._refresh(now)
            found = self._find(kid, alg)
            if found is None and kid is not None and self._may_refetch(now):
                log.info("issuer %s: unknown key id %r, fetching its keys again", self.name, kid)
                self._fetch_jwks(now)
                found = self._find(kid, alg)
            if found is None:
                if kid is None:
                    raise AuthenticationFailed(
                        f"the token names no key id and issuer {self._issuer} has no single "
                        f"{alg} key"
                    )
                raise AuthenticationFailed(f"issuer {self._issuer} has no key {kid[:100]!r}")
            return self._prepare(found, alg)

    # ------------------------------------------------------------------ internals

    def _may_refetch(self, now: float) -> bool:
        last = self._last_jwks_fetch
        return last is None or now - last >= self._settings.jwks_refetch_interval_seconds

    def _refresh(self, now: float) -> None:
        try:
            discovered = self._discovered_at
            if discovered is None or now - discovered >= self._settings.jwks_lifespan_seconds:
                self._discover()
            self._fetch_jwks(now)
        except AuthenticationUnavailable as err:
            if not self._keys:
                raise
            log.warning("issuer %s: keeping the keys already held: %s", self.name, err)
            self._next_refresh = now + max(self._settings.jwks_refetch_interval_seconds, 1.0)
            return
        self._next_refresh = now + self._settings.jwks_lifespan_seconds

    def _discover(self) -> None:
        self._discovered_at = None
        document = fetch_json(
            self._client,
            self._discovery,
            what=f"the discovery document of issuer {self.name}",
            bearer=self._bearer(),
        )
        named = document.get("issuer")
        if not isinstance(named, str) or (self._issuer is not None and named != self._issuer):
            raise AuthenticationUnavailable(
                f"the discovery document at {self._discovery} names issuer {named!r}, "
                f"not {self._issuer!r}"
            )
        self._issuer = named
        self._discovered_at = self._clock()
        if self._jwks_override is not None:
            self._jwks_uri = self._jwks_override
            return
        jwks_uri = document.get("jwks_uri")
        try:
            self._jwks_uri = check_url(jwks_uri, "jwks_uri") if isinstance(jwks_uri, str) else None
        except ValueError as err:
            raise AuthenticationUnavailable(f"issuer {named}: {err}") from None
        if self._jwks_uri is None:
            raise AuthenticationUnavailable(f"the discovery document of {named} has no jwks_uri")

    def _fetch_jwks(self, now: float) -> None:
        if self._jwks_uri is None:
            self._discover()
        assert self._jwks_uri is not None
        self._last_jwks_fetch = now
        self.fetches += 1
        document = fetch_json(
            self._client,
            self._jwks_uri,
            what=f"the keys (JWKS) of issuer {self.name}",
            bearer=self._bearer(),
        )
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise AuthenticationUnavailable(f"the JWKS at {self._jwks_uri} has no keys list")
        self._keys = [key for key in keys if isinstance(key, dict) and key.get("kty") != "oct"]
        self._prepared.clear()

    def _find(self, kid: str | None, alg: str) -> tuple[int, dict[str, Any]] | None:
        if kid is not None:
            for index, jwk in enumerate(self._keys):
                if jwk.get("kid") == kid:
                    if not fits(jwk, alg):
                        raise AuthenticationFailed(
                            f"key {kid[:100]!r} of issuer {self._issuer} cannot verify {alg}"
                        )
                    return index, jwk
            return None
        candidates = [(index, jwk) for index, jwk in enumerate(self._keys) if fits(jwk, alg)]
        return candidates[0] if len(candidates) == 1 else None

    def _prepare(self, found: tuple[int, dict[str, Any]], alg: str) -> PyJWK:
        index, jwk = found
        prepared = self._prepared.get((index, alg))
        if prepared is None:
            try:
                prepared = PyJWK(jwk, algorithm=alg)
            except (PyJWTError, ValueError, TypeError) as err:
                log.warning("issuer %s: key %r is unusable: %s", self.name, jwk.get("kid"), err)
                raise AuthenticationFailed(
                    f"the key of issuer {self._issuer} that signed the token is unusable"
                ) from None
            self._prepared[(index, alg)] = prepared
        return prepared
