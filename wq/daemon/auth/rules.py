"""Authorization rules: which callers get which permissions on which work-item types.

A rule matches a caller by OpenShift group membership (any listed group) or by the
claims of a JWT from one issuer (Vault's bound_claims pattern: every key must match,
a list matches when any of its values does). Claim values are compared after string
coercion, ignoring the case of ASCII letters only, so `project_id: 42` matches `"42"`
and `ref_protected: true` matches `"True"`, while Unicode lookalikes never match ASCII
(the long s U+017F is not `s`, U+00DF is not `ss`, the Kelvin sign U+212A is not `k`);
a claim missing from the token fails the rule. Callers get the union of what their matching rules
grant, and nothing when none matches. A rule with `projects` grants `submit` and
`retry` on items of those projects only (a CI job's token acts on its own project).
"""

from __future__ import annotations

import string
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wq.daemon.auth.config import RuleConfig
from wq.daemon.auth.core import ALL_TYPES, Principal, ProjectGrant

# str.lower and str.casefold also map non-ASCII characters onto ASCII (the Kelvin sign
# to `k`, the long s to `s`, the sharp s to `ss`): a lookalike claim would match a rule.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

# Claims shown by whoami for every JWT, besides those the rules constrain.
BASE_CLAIMS = ("iss", "sub", "aud")


def normalize(value: Any) -> str | None:
    """A claim value as a comparable string; None for what cannot match (null, objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value.translate(_ASCII_LOWER)
    return None


def value_set(value: Any) -> frozenset[str]:
    """The comparable strings of a claim value (a list contributes each element)."""
    values = value if isinstance(value, list) else [value]
    return frozenset(text for text in map(normalize, values) if text is not None)


@dataclass(frozen=True)
class Rule:
    """One configured rule (its position in the config names it in messages)."""

    index: int
    permissions: tuple[str, ...]
    item_types: tuple[str, ...] = ()
    projects: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    issuer: str | None = None
    claims: Mapping[str, Any] = field(default_factory=dict)
    bound: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, index: int, config: RuleConfig) -> Rule:
        """Build from the validated config."""
        claims = dict(config.claims or {})
        return cls(
            index=index,
            permissions=tuple(dict.fromkeys(config.permissions)),
            item_types=tuple(dict.fromkeys(config.item_types)),
            projects=tuple(dict.fromkeys(config.projects)),
            groups=tuple(config.groups or ()),
            issuer=config.issuer,
            claims=claims,
            bound={key: value_set(value) for key, value in claims.items()},
        )

    def matches_groups(self, groups: Collection[str]) -> bool:
        """True for a groups rule naming one of these groups (names compare exactly)."""
        return any(group in groups for group in self.groups)

    def matches_claims(self, issuer_names: Collection[str], claims: Mapping[str, Any]) -> bool:
        """True for an issuer rule of one of these issuers whose every claim matches."""
        if self.issuer is None or self.issuer not in issuer_names:
            return False
        return all(
            key in claims and not value_set(claims[key]).isdisjoint(expected)
            for key, expected in self.bound.items()
        )

    def grants(self) -> dict[str, frozenset[str]]:
        """The permissions per item type this rule grants on every project (`*` when it
        names no type; none when it is limited to some projects)."""
        if self.projects:
            return {}
        permissions = frozenset(self.permissions)
        return {name: permissions for name in self.item_types or (ALL_TYPES,)}

    def project_grant(self) -> ProjectGrant | None:
        """What the rule grants when it is limited to some projects."""
        if not self.projects:
            return None
        return ProjectGrant(
            frozenset(self.permissions), frozenset(self.item_types or (ALL_TYPES,)), self.projects
        )

    def public(self) -> dict[str, Any]:
        """The rule as whoami shows it (the config's shape; `item_types: []` means all)."""
        who: dict[str, Any] = (
            {"groups": list(self.groups)}
            if self.issuer is None
            else {"issuer": self.issuer, "claims": dict(self.claims)}
        )
        shown = {**who, "permissions": list(self.permissions), "item_types": list(self.item_types)}
        return {**shown, "projects": list(self.projects)} if self.projects else shown


def project_grants(rules: Iterable[Rule]) -> tuple[ProjectGrant, ...]:
    """What the rules limited to some projects grant."""
    return tuple(grant for rule in rules if (grant := rule.project_grant()) is not None)


def union(rules: Iterable[Rule]) -> dict[str, frozenset[str]]:
    """The permissions per item type granted by any of the rules."""
    merged: dict[str, frozenset[str]] = {}
    for rule in rules:
        for name, permissions in rule.grants().items():
            merged[name] = merged.get(name, frozenset()) | permissions
    return merged


class RuleSet:
    """The configured rules, and the principals they make of authenticated callers."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)

    @classmethod
    def from_config(cls, configs: Sequence[RuleConfig]) -> RuleSet:
        """Build from the validated `authorization.rules`."""
        return cls([Rule.from_config(index, config) for index, config in enumerate(configs)])

    @property
    def group_rules(self) -> list[Rule]:
        """The rules that match OpenShift groups."""
        return [rule for rule in self.rules if rule.issuer is None]

    @property
    def issuer_names(self) -> list[str]:
        """The issuers the rules name (URLs, or `k8s`), in config order."""
        return list(dict.fromkeys(rule.issuer for rule in self.rules if rule.issuer))

    def audiences(self, issuer_names: Collection[str]) -> frozenset[str]:
        """The (normalized) audiences any rule of these issuers accepts."""
        result: frozenset[str] = frozenset()
        for rule in self.rules:
            if rule.issuer in issuer_names:
                result |= rule.bound.get("aud", frozenset())
        return result

    def relevant_claims(
        self, issuer_names: Collection[str], claims: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The claims of a token that the rules of its issuer look at, plus iss/sub/aud."""
        keys = dict.fromkeys(BASE_CLAIMS)
        for rule in self.rules:
            if rule.issuer in issuer_names:
                keys.update(dict.fromkeys(rule.claims))
        return {key: claims[key] for key in keys if key in claims}

    def for_groups(self, identity: str, groups: Sequence[str], *, tier: str) -> Principal:
        """The principal of a caller known by its OpenShift groups."""
        matching = [rule for rule in self.rules if rule.matches_groups(groups)]
        return Principal(
            identity=identity,
            tier=tier,
            permissions=union(matching),
            project_grants=project_grants(matching),
            groups=tuple(groups),
            rules=tuple(rule.public() for rule in matching),
        )

    def for_claims(
        self,
        identity: str,
        *,
        issuer: str,
        issuer_names: Collection[str],
        claims: Mapping[str, Any],
        tier: str,
    ) -> Principal:
        """The principal of a caller known by the verified claims of a JWT."""
        matching = [rule for rule in self.rules if rule.matches_claims(issuer_names, claims)]
        return Principal(
            identity=identity,
            tier=tier,
            permissions=union(matching),
            project_grants=project_grants(matching),
            issuer=issuer,
            claims=self.relevant_claims(issuer_names, claims),
            rules=tuple(rule.public() for rule in matching),
        )
