"""The `authorization:` section of the config file: its schema and its validation.

The engine keeps the section as raw data; this module owns its meaning::

    authorization:
      rules:
        - groups: [queue-admins]              # OpenShift group membership (users/~)
          permissions: [read, submit, retry]
        - issuer: https://gitlab.com          # or `k8s`: the cluster's service accounts
          claims: {aud: wq, project_path: group/project}
          permissions: [submit]
          item_types: [mr]                    # omit for every type
      jwt: {leeway_seconds: 30, jwks_lifespan_seconds: 300, algorithms: [RS256, ES256]}
      k8s: {issuer: ..., api_url: ..., ca_file: ..., token_file: ...}
      openshift: {api_url: ..., ca_file: ..., cache_ttl_seconds: 300,
                  negative_cache_ttl_seconds: 10}

Every problem is a `ConfigError` naming the file and the key, e.g.
``config x.yml: authorization.rules[2]: an issuer rule must constrain aud in claims``
(rules are counted from 0, as the key path reads).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Collection
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from wq.engine.config import Config, ConfigError, Seconds, SecondsOrZero, validation_reason
from wq.types.project import ProjectPath

log = logging.getLogger(__name__)

K8S_ISSUER = "k8s"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Asymmetric signature algorithms only: `none` and HMAC (HS*) can never be configured.
Algorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]
SAFE_ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)
Permission = Literal["read", "retry", "submit"]
NonEmptyStr = Annotated[str, Field(min_length=1)]
SCALARS = (str, int, float, bool)


def is_loopback(host: str | None) -> bool:
    """True for localhost and loopback addresses (plain http is allowed only there)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(value: str, what: str) -> str:
    """An https URL (or http on loopback, for local issuers), without query or fragment."""
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{what} must be an https URL, got {value!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"{what} must use https (plain http only on loopback), got {value!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"{what} must not have a query or fragment, got {value!r}")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuleConfig(_Section):
    """One rule: who (groups, or issuer + claims) gets which permissions on which types."""

    groups: list[NonEmptyStr] | None = None
    issuer: NonEmptyStr | None = None
    claims: dict[str, Any] | None = None
    permissions: Annotated[list[Permission], Field(min_length=1)]
    item_types: list[NonEmptyStr] = Field(default_factory=list)
    # Limits `submit` and `retry` to items of these projects (each with the projects
    # under it); empty: every project.
    projects: list[ProjectPath] = Field(default_factory=list)

    @field_validator("issuer")
    @classmethod
    def _issuer_is_k8s_or_url(cls, issuer: str | None) -> str | None:
        if issuer is None or issuer == K8S_ISSUER:
            return issuer
        return check_url(issuer, "issuer")

    @field_validator("claims")
    @classmethod
    def _claims_are_scalars(cls, claims: dict[str, Any] | None) -> dict[str, Any] | None:
        for key, value in (claims or {}).items():
            if not key:
                raise ValueError("a claim name must not be empty")
            values = value if isinstance(value, list) else [value]
            if not values or not all(isinstance(v, SCALARS) for v in values):
                raise ValueError(
                    f"claim {key!r} must be a string, number, boolean or a non-empty list of them"
                )
            # An empty audience would accept tokens minted for no service in particular.
            if key == "aud" and not all(isinstance(v, str) and v.strip() for v in values):
                raise ValueError(
                    "claim 'aud' must be a non-empty string (or a list of them): it names "
                    "this service, so that tokens meant for another are refused"
                )
        return claims

    @model_validator(mode="after")
    def _groups_xor_issuer(self) -> RuleConfig:
        if self.groups is not None and self.issuer is not None:
            raise ValueError("a rule has either groups or issuer + claims, not both")
        if self.groups is None and self.issuer is None:
            raise ValueError("a rule needs groups, or issuer + claims")
        if self.groups is not None and not self.groups:
            raise ValueError("groups must name at least one group")
        if self.groups is not None and self.claims is not None:
            raise ValueError("claims belong to issuer rules; a groups rule has none")
        if self.issuer is not None and "aud" not in (self.claims or {}):
            raise ValueError("an issuer rule must constrain aud in claims")
        if self.projects and "read" in self.permissions:
            # Lists, counts and pools are filtered by type only: a read limited to some
            # projects would show the others' items there.
            raise ValueError(
                "projects limits submit and retry only; grant read in a rule without projects"
            )
        return self


class JwtConfig(_Section):
    """How JWTs are verified."""

    leeway_seconds: Annotated[float, Field(ge=0, le=300)] = 30.0
    jwks_lifespan_seconds: Seconds = 300.0
    jwks_refetch_interval_seconds: SecondsOrZero = 10.0
    algorithms: Annotated[list[Algorithm], Field(min_length=1)] = Field(
        default_factory=lambda: list(SAFE_ALGORITHMS)
    )
    timeout_seconds: Seconds = 5.0


class K8sConfig(_Section):
    """What the `k8s` issuer shorthand means: the cluster's service-account issuer."""

    issuer: str | None = None
    api_url: str | None = None
    ca_file: str = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
    token_file: str = f"{SERVICE_ACCOUNT_DIR}/token"

    @field_validator("issuer", "api_url")
    @classmethod
    def _url(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_url(value, str(info.field_name))


class OpenShiftConfig(_Section):
    """The OpenShift API that `users/~` lookups go to."""

    api_url: str | None = None
    ca_file: str | None = None
    cache_ttl_seconds: SecondsOrZero = 300.0
    cache_max_entries: Annotated[int, Field(gt=0, le=10_000_000, strict=True)] = 10_000
    # Refused tokens are remembered briefly: long enough to absorb a client's retry
    # loop, short enough that a token the API starts accepting soon works.
    negative_cache_ttl_seconds: Annotated[float, Field(ge=0, le=300)] = 10.0
    negative_cache_max_entries: Annotated[int, Field(gt=0, le=10_000_000, strict=True)] = 10_000
    timeout_seconds: Seconds = 5.0

    @field_validator("api_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, "api_url")


class AuthorizationConfig(_Section):
    """The whole `authorization:` section."""

    rules: list[RuleConfig] = Field(default_factory=list)
    jwt: JwtConfig = JwtConfig()
    k8s: K8sConfig = K8sConfig()
    openshift: OpenShiftConfig = OpenShiftConfig()


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = "authorization"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _message(error: Any) -> str:
    return "required" if error["type"] == "missing" else validation_reason(error)


def _rename_types(source: str, rules: Any) -> Any:
    """Accept the old `types` spelling of `item_types`, with a deprecation warning."""
    if not isinstance(rules, list):
        return rules
    renamed = []
    for index, rule in enumerate(rules):
        if isinstance(rule, dict) and "types" in rule:
            where = f"config {source}: authorization.rules[{index}]"
            if "item_types" in rule:
                raise ConfigError(f"{where}: give item_types or types (deprecated), not both")
            log.warning("%s: `types` is deprecated, write `item_types`", where)
            rule = {("item_types" if key == "types" else key): v for key, v in rule.items()}
        renamed.append(rule)
    return renamed


def parse_authorization(
    config: Config, known_types: Collection[str] | None = None
) -> AuthorizationConfig:
    """The validated `authorization:` section of a config (empty when it has none).

    `known_types`, when given, are the work-item type names a rule's `item_types`
    may name; anything else is a ConfigError (a typo would otherwise grant nothing).
    """
    data = config.authorization
    if data is None:
        return AuthorizationConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"config {config.source}: authorization: must be a mapping")
    if "rules" in data:
        data = {**data, "rules": _rename_types(config.source, data["rules"])}
    try:
        section = AuthorizationConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise ConfigError(
            f"config {config.source}: {_key_path(first['loc'])}: {_message(first)}"
        ) from None
    if known_types is not None:
        for index, rule in enumerate(section.rules):
            for name in rule.item_types:
                if name not in known_types:
                    known = ", ".join(sorted(known_types)) or "none"
                    raise ConfigError(
                        f"config {config.source}: authorization.rules[{index}].item_types: "
                        f"unknown work-item type {name!r} (known: {known})"
                    )
    return section
