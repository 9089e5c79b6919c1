"""Build the authenticator of a daemon from its config and its environment.

Tiers, in the order they are tried: the local token (embedded default), JWTs from
the issuers the rules name, OpenShift `users/~` (when a rule names groups, or
`authorization.openshift.api_url` is set). In a pod, the cluster's API server is
`https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, reached with the pod's
service-account CA (and, for the `k8s` issuer's discovery, its token). What cannot
work in this environment refuses to start with a ConfigError naming the key.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

import httpx

from wq.daemon.auth.config import K8S_ISSUER, AuthorizationConfig, parse_authorization
from wq.daemon.auth.core import (
    AuthenticationUnavailable,
    Authenticator,
    LocalTokenTier,
    Principal,
    Tier,
)
from wq.daemon.auth.jwt_tier import JwtTier
from wq.daemon.auth.oidc import DISCOVERY_PATH, KeySource
from wq.daemon.auth.openshift_tier import OpenShiftTier, TtlCache
from wq.daemon.auth.outbound import make_client
from wq.daemon.auth.rules import RuleSet
from wq.engine.config import Config, ConfigError

log = logging.getLogger(__name__)

K8S_JWKS_PATH = "/openid/v1/jwks"


def in_cluster_api_url(environ: Mapping[str, str]) -> str | None:
    """The API server of the cluster this pod runs in, or None outside a cluster."""
    host = environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return None
    port = environ.get("KUBERNETES_SERVICE_PORT") or "443"
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


class _Builder:
    """Turns the validated section into tiers; remembers the clients to close."""

    def __init__(
        self,
        config: Config,
        section: AuthorizationConfig,
        environ: Mapping[str, str],
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.section = section
        self.environ = environ
        self.clock = clock
        self.rules = RuleSet.from_config(section.rules)
        self.clients: list[httpx.Client] = []

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"config {self.config.source}: {key}: {message}")

    def client(self, *, timeout: float, ca_file: str | None, key: str) -> httpx.Client:
        try:
            client = make_client(timeout=timeout, ca_file=ca_file)
        except (OSError, ssl.SSLError) as err:
            raise self.fail(key, f"cannot use CA file {ca_file}: {err}") from None
        self.clients.append(client)
        return client

    def close(self) -> None:
        """Close every client made so far (the build failed)."""
        for client in self.clients:
            client.close()

    def first_rule(self, issuer: str | None) -> str:
        """The key of the first rule naming this issuer (None: the first groups rule)."""
        for rule in self.rules.rules:
            if rule.issuer == issuer:
                return f"authorization.rules[{rule.index}]"
        return "authorization.rules"

    # ------------------------------------------------------------------ JWT

    def jwt_tier(self, *, last: bool) -> JwtTier | None:
        names = self.rules.issuer_names
        if not names:
            return None
        settings = self.section.jwt
        first_client = len(self.clients)
        public = self.client(timeout=settings.timeout_seconds, ca_file=None, key="authorization")
        sources: dict[str, KeySource] = {}
        for name in names:
            if name == K8S_ISSUER:
                sources[name] = self.k8s_source()
            else:
                sources[name] = KeySource(
                    name, client=public, settings=settings, issuer=name, clock=self.clock
                )
        clients = self.clients[first_client:]
        return JwtTier(self.rules, sources, settings, last=last, clients=clients)

    def k8s_source(self) -> KeySource:
        k8s = self.section.k8s
        settings = self.section.jwt
        explicit = k8s.model_fields_set
        api = k8s.api_url or in_cluster_api_url(self.environ)
        if api is None:
            if k8s.issuer is None:
                raise self.fail(
                    self.first_rule(K8S_ISSUER),
                    "the k8s issuer needs a cluster: run in a pod, or set "
                    "authorization.k8s.issuer (or authorization.k8s.api_url)",
                )
            client = self.client(
                timeout=settings.timeout_seconds, ca_file=None, key="authorization.k8s"
            )
            return KeySource(
                K8S_ISSUER, client=client, settings=settings, issuer=k8s.issuer, clock=self.clock
            )
        ca_file = self.existing("authorization.k8s.ca_file", k8s.ca_file, "ca_file" in explicit)
        token_file = self.existing(
            "authorization.k8s.token_file", k8s.token_file, "token_file" in explicit
        )
        client = self.client(
            timeout=settings.timeout_seconds, ca_file=ca_file, key="authorization.k8s.ca_file"
        )
        base = api.rstrip("/")
        return KeySource(
            K8S_ISSUER,
            client=client,
            settings=settings,
            issuer=k8s.issuer,
            discovery=base + DISCOVERY_PATH,
            jwks_url=base + K8S_JWKS_PATH,
            bearer=_file_reader(token_file),
            clock=self.clock,
        )

    def existing(self, key: str, path: str | None, explicit: bool) -> str | None:
        """A file that exists; a missing explicit one is an error, a missing default None."""
        if path is None or Path(path).is_file():
            return path
        if explicit:
            raise self.fail(key, f"no such file: {path}")
        return None

    # ------------------------------------------------------------------ OpenShift

    def openshift_tier(self) -> OpenShiftTier | None:
        settings = self.section.openshift
        if not self.rules.group_rules and settings.api_url is None:
            return None
        api = settings.api_url or in_cluster_api_url(self.environ)
        if api is None:
            raise self.fail(
                self.first_rule(None),
                "group rules need the OpenShift API: set authorization.openshift.api_url, "
                "or run in a cluster",
            )
        if settings.ca_file is not None:
            ca_file = self.existing("authorization.openshift.ca_file", settings.ca_file, True)
        elif settings.api_url is None:  # in a pod: the service-account CA
            ca_file = self.existing("authorization.k8s.ca_file", self.section.k8s.ca_file, False)
        else:
            ca_file = None
        client = self.client(
            timeout=settings.timeout_seconds, ca_file=ca_file, key="authorization.openshift"
        )
        cache: TtlCache[Principal] = TtlCache(
            settings.cache_ttl_seconds, settings.cache_max_entries, self.clock
        )
        rejected: TtlCache[str] = TtlCache(
            settings.negative_cache_ttl_seconds, settings.negative_cache_max_entries, self.clock
        )
        return OpenShiftTier(self.rules, api_url=api, client=client, cache=cache, rejected=rejected)


def _file_reader(path: str | None) -> Callable[[], str | None]:
    """Reads the pod's token at each use (projected tokens are rotated)."""

    def read() -> str | None:
        if path is None:
            return None
        try:
            return Path(path).read_text(encoding="utf-8").strip() or None
        except OSError as err:
            raise AuthenticationUnavailable(f"cannot read the pod's token {path}: {err}") from None

    return read


def build_authenticator(
    config: Config,
    *,
    known_types: Collection[str] | None = None,
    local_tier: LocalTokenTier | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    quiet: bool = False,
) -> Authenticator:
    """The tiers this config asks for, or a ConfigError naming the key at fault.

    `quiet`: no line says which tiers were built (a check, not a start).
    """
    section = parse_authorization(config, known_types)
    builder = _Builder(config, section, os.environ if environ is None else environ, clock)
    try:
        openshift = builder.openshift_tier()
        jwt_tier = builder.jwt_tier(last=openshift is None)
    except ConfigError:
        builder.close()
        raise
    tiers: list[Tier] = [local_tier] if local_tier is not None else []
    if jwt_tier is not None:
        tiers.append(jwt_tier)
        if not quiet:
            log.info("auth: JWT issuers %s", ", ".join(jwt_tier.sources))
    if openshift is not None:
        tiers.append(openshift)
        if not quiet:
            log.info("auth: OpenShift users/~ at %s", openshift.api_url)
    return Authenticator(tiers)
