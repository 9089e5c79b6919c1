"""Rule matching (groups; issuer + claims, AND across keys, OR within lists, coerced and
case-insensitive) and the permission matrix as a table."""

from __future__ import annotations

from typing import Any

import pytest

from tests.daemon.auth.conftest import AUD, auth_config
from wq.daemon.auth import Principal
from wq.daemon.auth.config import parse_authorization
from wq.daemon.auth.rules import RuleSet, normalize

GITLAB = "https://gitlab.example.com"


def ruleset(*rules: dict[str, Any]) -> RuleSet:
    return RuleSet.from_config(parse_authorization(auth_config({"rules": list(rules)})).rules)


def claims_rule(**claims: Any) -> RuleSet:
    return ruleset({"issuer": GITLAB, "claims": {"aud": AUD, **claims}, "permissions": ["read"]})


def grants_read(rules: RuleSet, **claims: Any) -> bool:
    principal = rules.for_claims(
        "x", issuer=GITLAB, issuer_names=[GITLAB], claims={"aud": AUD, **claims}, tier="jwt"
    )
    return principal.allows("read", "mr")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Group/Rpms", "group/rpms"),
        (42, "42"),
        (42.0, "42"),
        (4.5, "4.5"),
        (True, "true"),
        (False, "false"),
        (None, None),
        ({"a": 1}, None),
        # only ASCII letters change case: lookalikes stay themselves
        ("RPM\u017f", "rpm\u017f"),
        ("Stra\u00dfe", "stra\u00dfe"),
        ("\u212aey", "\u212aey"),
        ("\ufb01le", "\ufb01le"),
        ("\u00c9t\u00e9", "\u00c9t\u00e9"),
    ],
)
def test_normalize(value: Any, expected: str | None) -> None:
    assert normalize(value) == expected


@pytest.mark.parametrize(
    ("rule_claims", "token_claims", "matches"),
    [
        # every key must match (AND)
        (
            {"project_path": "g/rpms", "ref": "main"},
            {"project_path": "g/rpms", "ref": "main"},
            True,
        ),
        (
            {"project_path": "g/rpms", "ref": "main"},
            {"project_path": "g/rpms", "ref": "dev"},
            False,
        ),
        # a claim the token lacks fails the rule; so does a null one
        ({"ref": "main"}, {}, False),
        ({"ref": "main"}, {"ref": None}, False),
        # a list in the rule matches any of its values (OR)
        ({"ref": ["main", "release"]}, {"ref": "release"}, True),
        ({"ref": ["main", "release"]}, {"ref": "dev"}, False),
        # a list in the token (like aud) matches when any element does
        ({"groups": "admins"}, {"groups": ["devs", "Admins"]}, True),
        ({"groups": "admins"}, {"groups": ["devs"]}, False),
        # case-insensitive, after string coercion of numbers and booleans
        ({"project_path": "G/RPMS"}, {"project_path": "g/rpms"}, True),
        ({"project_id": 42}, {"project_id": "42"}, True),
        ({"project_id": "42"}, {"project_id": 42}, True),
        ({"project_id": 42}, {"project_id": 43}, False),
        ({"ref_protected": True}, {"ref_protected": "true"}, True),
        ({"ref_protected": "TRUE"}, {"ref_protected": True}, True),
        ({"ref_protected": True}, {"ref_protected": False}, False),
        # objects never match a scalar
        ({"ns": "a"}, {"ns": {"name": "a"}}, False),
        # Unicode lookalikes never equal ASCII, whichever side carries them
        ({"project_path": "g/rpms"}, {"project_path": "g/rpm\u017f"}, False),
        ({"project_path": "g/rpms"}, {"project_path": "g/RPM\u017f"}, False),
        ({"project_path": "g/rpm\u017f"}, {"project_path": "g/rpms"}, False),
        ({"ns": "strasse"}, {"ns": "stra\u00dfe"}, False),
        ({"ns": "stra\u00dfe"}, {"ns": "STRASSE"}, False),
        ({"ns": "file"}, {"ns": "\ufb01le"}, False),
        ({"ns": "kube"}, {"ns": "\u212aube"}, False),
        ({"ns": "kube"}, {"ns": "KUBE"}, True),
        ({"ns": "i"}, {"ns": "\u0130"}, False),
        ({"ref": ["main", "rpms"]}, {"ref": "rpm\u017f"}, False),
    ],
)
def test_claim_matching(
    rule_claims: dict[str, Any], token_claims: dict[str, Any], matches: bool
) -> None:
    assert grants_read(claims_rule(**rule_claims), **token_claims) is matches


def test_aud_is_matched_like_any_claim() -> None:
    rules = claims_rule()
    assert grants_read(rules, aud=[AUD.upper(), "other"])
    principal = rules.for_claims(
        "x", issuer=GITLAB, issuer_names=[GITLAB], claims={"aud": "other"}, tier="jwt"
    )
    assert principal.permissions == {}


def test_a_lookalike_audience_is_not_accepted() -> None:
    rules = claims_rule()
    lookalike = AUD.replace("s", "\u017f")
    assert lookalike != AUD
    assert rules.audiences([GITLAB]) == frozenset({AUD})
    assert not grants_read(rules, aud=lookalike)


def test_an_issuer_rule_only_matches_its_issuer() -> None:
    rules = claims_rule()
    principal = rules.for_claims(
        "x", issuer="https://other", issuer_names=["https://other"], claims={"aud": AUD}, tier="jwt"
    )
    assert principal.permissions == {} and principal.rules == ()


def test_groups_compare_exactly_and_any_group_matches() -> None:
    rules = ruleset({"groups": ["admins", "ops"], "permissions": ["read"]})
    assert rules.for_groups("a", ["devs", "ops"], tier="ocp-user").allows("read", "mr")
    assert not rules.for_groups("a", ["Admins"], tier="ocp-user").allows("read", "mr")
    assert not rules.for_groups("a", [], tier="ocp-user").allows("read", "mr")


# --------------------------------------------------------------------------- the matrix

RULE_SETS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "spec": [
        {"issuer": "k8s", "claims": {"aud": AUD}, "permissions": ["read"]},
        {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
        {
            "issuer": "k8s",
            "claims": {"aud": AUD, "sub": "system:serviceaccount:ci:rpms-ci"},
            "permissions": ["submit", "retry"],
            "item_types": ["mr"],
        },
        {
            "issuer": GITLAB,
            "claims": {"aud": AUD, "project_path": "group/rpms"},
            "permissions": ["read", "submit", "retry"],
            "item_types": ["mr"],
        },
    ],
    "scoped": [
        {"groups": ["devs"], "permissions": ["read"], "item_types": ["task"]},
        {"groups": ["devs", "oncall"], "permissions": ["retry"], "item_types": ["mr", "task"]},
        {"groups": ["oncall"], "permissions": ["read"]},
    ],
}
K8S = "https://kubernetes.default.svc"


def identity(rules: RuleSet, who: str) -> Principal:
    if who == "admin":
        return rules.for_groups(who, ["admins"], tier="ocp-user")
    if who == "dev":
        return rules.for_groups(who, ["devs"], tier="ocp-user")
    if who == "oncall-dev":
        return rules.for_groups(who, ["devs", "oncall"], tier="ocp-user")
    if who == "nobody":
        return rules.for_groups(who, ["system:authenticated"], tier="ocp-user")
    k8s = {"iss": K8S, "aud": [AUD]}
    if who == "any-sa":
        claims = {**k8s, "sub": "system:serviceaccount:web:frontend"}
        return rules.for_claims(who, issuer=K8S, issuer_names=["k8s"], claims=claims, tier="jwt")
    if who == "ci-sa":
        claims = {**k8s, "sub": "system:serviceaccount:ci:rpms-ci"}
        return rules.for_claims(who, issuer=K8S, issuer_names=["k8s"], claims=claims, tier="jwt")
    if who == "gitlab-rpms":
        claims = {"iss": GITLAB, "aud": AUD, "project_path": "Group/RPMS"}
        return rules.for_claims(
            who, issuer=GITLAB, issuer_names=[GITLAB], claims=claims, tier="jwt"
        )
    if who == "gitlab-other":
        claims = {"iss": GITLAB, "aud": AUD, "project_path": "group/other"}
        return rules.for_claims(
            who, issuer=GITLAB, issuer_names=[GITLAB], claims=claims, tier="jwt"
        )
    raise AssertionError(who)


# (identity, rule set, permission, type) -> allowed
MATRIX = [
    ("admin", "none", "read", "mr", False),
    ("any-sa", "none", "read", "mr", False),
    ("admin", "spec", "read", "mr", True),
    ("admin", "spec", "submit", "task", True),
    ("admin", "spec", "retry", "mr", True),
    ("nobody", "spec", "read", "mr", False),
    ("any-sa", "spec", "read", "mr", True),
    ("any-sa", "spec", "read", "task", True),
    ("any-sa", "spec", "submit", "mr", False),
    ("any-sa", "spec", "retry", "mr", False),
    ("ci-sa", "spec", "read", "task", True),  # union with the read-all rule
    ("ci-sa", "spec", "submit", "mr", True),
    ("ci-sa", "spec", "retry", "mr", True),
    ("ci-sa", "spec", "submit", "task", False),
    ("gitlab-rpms", "spec", "submit", "mr", True),
    ("gitlab-rpms", "spec", "read", "mr", True),
    ("gitlab-rpms", "spec", "read", "task", False),
    ("gitlab-other", "spec", "read", "mr", False),
    ("dev", "scoped", "read", "task", True),
    ("dev", "scoped", "read", "mr", False),
    ("dev", "scoped", "retry", "mr", True),
    ("dev", "scoped", "submit", "task", False),
    ("oncall-dev", "scoped", "read", "mr", True),
    ("oncall-dev", "scoped", "retry", "task", True),
    ("oncall-dev", "scoped", "submit", "mr", False),
]


@pytest.mark.parametrize(("who", "rule_set", "permission", "item_type", "allowed"), MATRIX)
def test_permission_matrix(
    who: str, rule_set: str, permission: str, item_type: str, allowed: bool
) -> None:
    principal = identity(ruleset(*RULE_SETS[rule_set]), who)
    assert principal.allows(permission, item_type) is allowed


def test_matching_rules_and_their_union_are_reported() -> None:
    rules = ruleset(*RULE_SETS["spec"])
    principal = identity(rules, "ci-sa")
    assert principal.effective_permissions(["mr", "task"]) == {
        "mr": ["read", "retry", "submit"],
        "task": ["read"],
    }
    assert principal.rules == (
        {"issuer": "k8s", "claims": {"aud": AUD}, "permissions": ["read"], "item_types": []},
        {
            "issuer": "k8s",
            "claims": {"aud": AUD, "sub": "system:serviceaccount:ci:rpms-ci"},
            "permissions": ["submit", "retry"],
            "item_types": ["mr"],
        },
    )
    assert principal.claims == {
        "iss": K8S,
        "sub": "system:serviceaccount:ci:rpms-ci",
        "aud": [AUD],
    }
    assert identity(rules, "nobody").effective_permissions(["mr"]) == {}
