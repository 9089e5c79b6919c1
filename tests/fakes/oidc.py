"""A fake OIDC issuer: discovery document and JWKS over real HTTP(S) on loopback.

PyJWT and httpx talk to it unchanged. Keys are real (RSA and EC, from `cryptography`),
so tokens it signs verify exactly as a real issuer's would::

    with FakeOidcIssuer() as issuer:
        issuer.add_key(rsa_key("k1"))
        token = issuer.token(sub="ci", aud="wq")

It can rotate keys (`add_key(..., sign=True)` then `retire(kid)`), name another issuer
in its discovery document (`discovery_issuer`), demand a Bearer token on every
request (`require_bearer`, as a cluster's API server does) and serve its JWKS at any
path (`/openid/v1/jwks` for a Kubernetes API server). `count(path)` tells how often
each document was fetched.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.fakes.loopback import LoopbackServer, Request, Response

DISCOVERY_PATH = "/.well-known/openid-configuration"

__all__ = [
    "DISCOVERY_PATH",
    "FakeOidcIssuer",
    "SigningKey",
    "ec_key",
    "fake_oidc",
    "forge_hs256",
    "forge_unsigned",
    "rsa_key",
]


@dataclass(frozen=True)
class SigningKey:
    """A private key, its key id and algorithm, and its public JWK."""

    kid: str
    alg: str
    private_key: Any

    @property
    def public_key(self) -> Any:
        return self.private_key.public_key()

    @property
    def public_pem(self) -> bytes:
        return bytes(
            self.public_key.public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def jwk(self) -> dict[str, Any]:
        codec = RSAAlgorithm if isinstance(self.public_key, rsa.RSAPublicKey) else ECAlgorithm
        jwk: dict[str, Any] = codec.to_jwk(self.public_key, as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}


@functools.cache
def _rsa_private(label: str) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def _ec_private(label: str, curve: str) -> ec.EllipticCurvePrivateKey:
    curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}
    return ec.generate_private_key(curves[curve])


def rsa_key(kid: str, alg: str = "RS256") -> SigningKey:
    """An RSA-2048 key (the same private key for the same kid within a test run)."""
    return SigningKey(kid, alg, _rsa_private(kid))


def ec_key(kid: str, alg: str = "ES256") -> SigningKey:
    """An EC key on the curve of `alg` (the same for the same kid within a test run)."""
    curve = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[alg]
    return SigningKey(kid, alg, _ec_private(kid, curve))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segments(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return (
        _b64(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + _b64(json.dumps(claims, separators=(",", ":")).encode())
    )


def forge_unsigned(claims: dict[str, Any], **header: Any) -> str:
    """A token with `alg: none` and an empty signature."""
    return _segments({"typ": "JWT", "alg": "none", **header}, claims) + "."


def forge_hs256(claims: dict[str, Any], secret: bytes, **header: Any) -> str:
    """A token "signed" HS256 with `secret` (the key-confusion attack uses a public key)."""
    signing_input = _segments({"typ": "JWT", "alg": "HS256", **header}, claims)
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(signature)


class FakeOidcIssuer(LoopbackServer):
    """An OIDC issuer serving discovery and JWKS (see the module docstring)."""

    name = "fake-oidc"

    def __init__(
        self,
        *,
        issuer: str | None = None,
        jwks_path: str = "/jwks",
        require_bearer: str | None = None,
        tls_dir: Path | None = None,
    ) -> None:
        super().__init__(tls_dir=tls_dir)
        self._issuer = issuer
        self.jwks_path = jwks_path
        self.require_bearer = require_bearer
        self.discovery_issuer: str | None = None  # name another issuer in discovery
        self.published: list[SigningKey] = []
        self.signing: SigningKey | None = None

    @property
    def issuer(self) -> str:
        """The issuer URL: the one given, else the server's own URL."""
        return self._issuer or self.url

    # ----------------------------------------------------------------- keys

    def add_key(self, key: SigningKey, *, sign: bool = True) -> SigningKey:
        """Publish a key; with `sign`, new tokens are signed with it (rotation)."""
        with self._lock:
            self.published = [k for k in self.published if k.kid != key.kid] + [key]
            if sign:
                self.signing = key
        return key

    def retire(self, kid: str) -> None:
        """Stop publishing a key (tokens it signed no longer verify once refetched)."""
        with self._lock:
            self.published = [k for k in self.published if k.kid != kid]

    # ----------------------------------------------------------------- tokens

    def claims(self, lifetime: float = 300, **claims: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.issuer, "iat": now, "nbf": now, "exp": now + int(lifetime), **claims}

    def token(
        self,
        *,
        key: SigningKey | None = None,
        lifetime: float = 300,
        headers: dict[str, Any] | None = None,
        drop: tuple[str, ...] = (),
        **claims: Any,
    ) -> str:
        """A token signed by `key` (default: the current signing key) with these claims.

        `iss`, `iat`, `nbf` and `exp` are filled in unless given; `drop` removes claims;
        a header given as None is left out (`headers={"kid": None}`: no key id).
        """
        key = key or self.signing
        assert key is not None, "add a key first"
        payload = self.claims(lifetime, **claims)
        for name in drop:
            payload.pop(name, None)
        header = {"kid": key.kid, **(headers or {})}
        return jwt.encode(
            payload,
            key.private_key,
            algorithm=key.alg,
            headers={name: value for name, value in header.items() if value is not None},
        )

    # ----------------------------------------------------------------- serving

    def handle(self, request: Request) -> Response:
        if self.require_bearer is not None and request.bearer != self.require_bearer:
            return 401, {"kind": "Status", "message": "Unauthorized", "code": 401}, {}
        if request.method != "GET":
            return 405, {"message": "method not allowed"}, {}
        if request.path == DISCOVERY_PATH:
            return (
                200,
                {
                    "issuer": self.discovery_issuer or self.issuer,
                    "jwks_uri": self.url + self.jwks_path,
                    "response_types_supported": ["id_token"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": sorted(
                        {k.alg for k in self.published}
                    ),
                },
                {},
            )
        if request.path == self.jwks_path:
            with self._lock:
                keys = [key.jwk() for key in self.published]
            return 200, {"keys": keys}, {}
        return 404, {"message": "not found"}, {}


@pytest.fixture
def fake_oidc() -> Iterator[FakeOidcIssuer]:
    """A started issuer with one RSA key (kid `rsa-1`); stopped after the test."""
    with FakeOidcIssuer() as issuer:
        assert isinstance(issuer, FakeOidcIssuer)
        issuer.add_key(rsa_key("rsa-1"))
        yield issuer
