"""One JWT issuer's signing keys: OIDC discovery, then its JWKS, cached for a lifespan.

The discovery document (`{issuer}/.well-known/openid-configuration`) must name
exactly the configured issuer; its `jwks_uri` gives the keys. Keys are cached for
`jwks_lifespan_seconds`; a token naming a key id the cache does not hold triggers
one refetch (at most one per `jwks_refetch_interval_seconds`, so a flood of forged
key ids cannot hammer the issuer). When a refresh fails the keys already held stay
in use (a warning is logged); with no keys at all the caller gets a 503. One fetch runs
at a time and only callers with no keys to go on wait for it (they share its outcome;
a failure answers the next second's callers too); everyone else is answered from the
keys held meanwhile.

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


# A fetch that failed while no keys are held answers the callers of the next second
# too: each would otherwise wait out a timeout of its own, one after another. Each
# failure in a row doubles that (up to FAILURE_MEMORY_MAX_SECONDS): anyone can send a
# token naming the issuer, and each fetch of an issuer that hangs holds a request
# thread for the whole timeout.
FAILURE_MEMORY_SECONDS = 1.0
FAILURE_MEMORY_MAX_SECONDS = 30.0
# While no keys are held, a caller waits this long at most for the fetch under way
# (503 after it): a fetch that hangs must not hold every request thread with it.
FETCH_WAIT_SECONDS = 1.0
# Callers waiting so at once, at most: one more is answered 503 without waiting, so that
# tokens naming an issuer that hangs (no signature is needed to name one) hold at most
# the fetching thread and these of the request threads.
MAX_FETCH_WAITERS = 2


class _KeySet:
    """One fetched JWKS and the keys prepared from it; a fetch replaces it whole, so a
    reader never mixes two key sets."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.prepared: dict[tuple[int, str], PyJWK] = {}

    def find(
        self, kid: str | None, alg: str, issuer: str | None
    ) -> tuple[int, dict[str, Any]] | None:
        """The key `kid` (or the only one fitting `alg` when no kid is named), or None."""
        if kid is not None:
            for index, jwk in enumerate(self.keys):
                if jwk.get("kid") == kid:
                    if not fits(jwk, alg):
                        raise AuthenticationFailed(
                            f"key {kid[:100]!r} of issuer {issuer} cannot verify {alg}"
                        )
                    return index, jwk
            return None
        candidates = [(index, jwk) for index, jwk in enumerate(self.keys) if fits(jwk, alg)]
        return candidates[0] if len(candidates) == 1 else None

    def prepare(
        self, found: tuple[int, dict[str, Any]], alg: str, name: str, issuer: str | None
    ) -> PyJWK:
        """The verifying key of a found JWK (made once per key and algorithm)."""
        index, jwk = found
        prepared = self.prepared.get((index, alg))
        if prepared is None:
            try:
                prepared = PyJWK(jwk, algorithm=alg)
            except (PyJWTError, ValueError, TypeError) as err:
                log.warning("issuer %s: key %r is unusable: %s", name, jwk.get("kid"), err)
                raise AuthenticationFailed(
                    f"the key of issuer {issuer} that signed the token is unusable"
                ) from None
            self.prepared[(index, alg)] = prepared
        return prepared


class KeySource:
    """The signing keys of one issuer (thread-safe).

    One fetch at a time, and nobody waits for it who need not: while it runs (the
    refresh at the end of the lifespan, a refetch for an unknown key id), callers are
    answered from the keys held; only callers with nothing to go on wait for it, and
    share its outcome.
    """

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
        self._cond = threading.Condition()
        self._fetching = False  # a fetch is under way (its thread alone changes the state)
        self._waiting = 0  # callers waiting for that fetch's outcome
        self._failure: tuple[float, AuthenticationUnavailable] | None = None
        self._failures_in_row = 0
        self._jwks_uri: str | None = None
        self._held = _KeySet([])
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
        self._fetch_if(lambda _: self._issuer is None, lambda _: self._discover())
        assert self._issuer is not None
        return self._issuer

    def key(self, kid: str | None, alg: str) -> PyJWK:
        """The key that verifies a token signed with `alg` by key `kid`, or raise."""
        self._fetch_if(self._refresh_due, self._refresh)
        held = self._held
        found = held.find(kid, alg, self._issuer)
        if found is None and kid is not None:

            def unknown(now: float) -> bool:
                return self._held.find(kid, alg, self._issuer) is None and self._may_refetch(now)

            def refetch(now: float) -> None:
                log.info("issuer %s: unknown key id %r, fetching its keys again", self.name, kid)
                self._fetch_jwks(now)

            self._fetch_if(unknown, refetch)
            held = self._held
            found = held.find(kid, alg, self._issuer)
        if found is None:
            if kid is None:
                raise AuthenticationFailed(
                    f"the token names no key id and issuer {self._issuer} has no single {alg} key"
                )
            raise AuthenticationFailed(f"issuer {self._issuer} has no key {kid[:100]!r}")
        return held.prepare(found, alg, self.name, self._issuer)

    # ------------------------------------------------------------------ internals

    def _fetch_if(self, wanted: Callable[[float], bool], fetch: Callable[[float], None]) -> None:
        """Run `fetch` while `wanted` holds, one at a time. While another runs, return
        at once when keys are held (the caller uses them), else wait for its outcome."""
        waited_until = time.monotonic() + FETCH_WAIT_SECONDS
        with self._cond:
            while True:
                now = self._clock()
                if not wanted(now):
                    return
                if not self._fetching:
                    break
                if self._held.keys and self._issuer is not None:
                    return
                left = waited_until - time.monotonic()
                if left <= 0 or self._waiting >= MAX_FETCH_WAITERS:
                    raise AuthenticationUnavailable(
                        f"the keys of issuer {self.name} are still being fetched"
                    )
                self._waiting += 1
                try:
                    self._cond.wait(timeout=left)
                finally:
                    self._waiting -= 1
            if self._failure is not None and not self._held.keys:
                failed_at, failure = self._failure
                memory = FAILURE_MEMORY_SECONDS * 2.0 ** min(self._failures_in_row - 1, 10)
                if now - failed_at < min(memory, FAILURE_MEMORY_MAX_SECONDS):
                    raise AuthenticationUnavailable(str(failure))
            self._fetching = True
        failed: AuthenticationUnavailable | None = None
        try:
            fetch(now)
        except AuthenticationUnavailable as err:
            failed = err
            raise
        finally:
            with self._cond:
                self._fetching = False
                self._failure = None if failed is None else (self._clock(), failed)
                self._failures_in_row = 0 if failed is None else self._failures_in_row + 1
                self._cond.notify_all()

    def _refresh_due(self, now: float) -> bool:
        return self._next_refresh is None or now >= self._next_refresh

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
            if not self._held.keys:
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
            what=f"the key set (JWKS) of issuer {self.name}",
            bearer=self._bearer(),
        )
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise AuthenticationUnavailable(f"the JWKS at {self._jwks_uri} has no keys list")
        self._held = _KeySet(
            [key for key in keys if isinstance(key, dict) and key.get("kty") != "oct"]
        )
