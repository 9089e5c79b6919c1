"""The `authorization:` section: every mistake refuses to start, naming the file and key."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.daemon.auth.conftest import AUD, KNOWN_TYPES, auth_config, authenticator
from wq.daemon import commands
from wq.daemon.auth.config import SAFE_ALGORITHMS, parse_authorization
from wq.daemon.auth.jwt_tier import JwtTier
from wq.daemon.auth.openshift_tier import OpenShiftTier
from wq.engine.config import ConfigError

GITLAB = "https://gitlab.example.com"
GOOD_RULES: list[dict[str, Any]] = [
    {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
    {"issuer": "k8s", "claims": {"aud": AUD}, "permissions": ["read"]},
    {
        "issuer": GITLAB,
        "claims": {"aud": AUD, "project_path": "group/rpms", "project_id": 42},
        "permissions": ["submit"],
        "item_types": ["mr"],
    },
]


def rules_with(bad: dict[str, Any]) -> dict[str, Any]:
    """The good rules with `bad` as rules[2] (so that messages must name the index)."""
    return {"rules": [GOOD_RULES[0], GOOD_RULES[1], bad]}


def error_of(authorization: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_authorization(auth_config(authorization), KNOWN_TYPES)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("config test.yml: authorization")
    return message


def test_the_spec_example_is_valid() -> None:
    section = parse_authorization(auth_config({"rules": GOOD_RULES}), KNOWN_TYPES)
    assert [rule.permissions for rule in section.rules] == [
        ["read", "submit", "retry"],
        ["read"],
        ["submit"],
    ]
    assert section.rules[2].item_types == ["mr"]
    assert section.rules[0].item_types == []
    assert section.openshift.cache_ttl_seconds == 300
    assert tuple(section.jwt.algorithms) == SAFE_ALGORITHMS


def test_no_section_means_no_rules() -> None:
    assert parse_authorization(auth_config(None)).rules == []


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (
            {"issuer": GITLAB, "claims": {"project_path": "a/b"}, "permissions": ["read"]},
            "authorization.rules[2]: an issuer rule must constrain aud in claims",
        ),
        (
            {"issuer": "k8s", "permissions": ["read"]},
            "authorization.rules[2]: an issuer rule must constrain aud in claims",
        ),
        (
            {
                "groups": ["admins"],
                "issuer": GITLAB,
                "claims": {"aud": AUD},
                "permissions": ["read"],
            },
            "authorization.rules[2]: a rule has either groups or issuer + claims, not both",
        ),
        ({"permissions": ["read"]}, "authorization.rules[2]: a rule needs groups, or issuer"),
        ({"groups": [], "permissions": ["read"]}, "authorization.rules[2]: groups must name"),
        (
            {"groups": ["a"], "claims": {"aud": AUD}, "permissions": ["read"]},
            "authorization.rules[2]: claims belong to issuer rules",
        ),
        ({"groups": ["a"], "permissions": ["admin"]}, "authorization.rules[2].permissions[0]:"),
        ({"groups": ["a"], "permissions": []}, "authorization.rules[2].permissions:"),
        ({"groups": ["a"]}, "authorization.rules[2].permissions: required"),
        ({"groups": ["a"], "permissions": ["read"], "role": "x"}, "rules[2].role: unknown key"),
        (
            {"issuer": "http://idp.example.com", "claims": {"aud": AUD}, "permissions": ["read"]},
            "authorization.rules[2].issuer: issuer must use https",
        ),
        (
            {"issuer": "gitlab.com", "claims": {"aud": AUD}, "permissions": ["read"]},
            "authorization.rules[2].issuer: issuer must be an https URL",
        ),
        (
            {"issuer": GITLAB, "claims": {"aud": {"a": 1}}, "permissions": ["read"]},
            "authorization.rules[2].claims: claim 'aud' must be a string",
        ),
        (
            {"issuer": GITLAB, "claims": {"aud": []}, "permissions": ["read"]},
            "authorization.rules[2].claims: claim 'aud' must be",
        ),
        (
            {"issuer": GITLAB, "claims": {"aud": ""}, "permissions": ["read"]},
            "authorization.rules[2].claims: claim 'aud' must be a non-empty string",
        ),
        (
            {"issuer": GITLAB, "claims": {"aud": "  "}, "permissions": ["read"]},
            "authorization.rules[2].claims: claim 'aud' must be a non-empty string",
        ),
        (
            {"issuer": GITLAB, "claims": {"aud": [AUD, ""]}, "permissions": ["read"]},
            "authorization.rules[2].claims: claim 'aud' must be a non-empty string",
        ),
        (
            {"issuer": GITLAB, "claims": {"aud": 42}, "permissions": ["read"]},
            "authorization.rules[2].claims: claim 'aud' must be a non-empty string",
        ),
        (
            {"groups": ["a"], "permissions": ["read"], "item_types": ["nope"]},
            "authorization.rules[2].item_types: unknown work-item type 'nope'",
        ),
        (
            {"groups": ["a"], "permissions": ["read"], "types": ["mr"], "item_types": ["mr"]},
            "authorization.rules[2]: give item_types or types (deprecated), not both",
        ),
        (
            {"groups": ["a"], "permissions": ["read", "submit"], "projects": ["group/rpms"]},
            "authorization.rules[2]: projects limits submit and retry only; grant read in a"
            " rule without projects",
        ),
        (
            {"groups": ["a"], "permissions": ["submit"], "projects": ["group/../rpms"]},
            "authorization.rules[2].projects[0]:",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_bad_rule_names_itself(rule: dict[str, Any], expected: str) -> None:
    assert expected in error_of(rules_with(rule))


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"rules": "all"}, "authorization.rules: Input should be a valid list"),
        ({"jwt": {"algorithms": ["none"]}}, "authorization.jwt.algorithms[0]:"),
        ({"jwt": {"algorithms": ["HS256"]}}, "authorization.jwt.algorithms[0]:"),
        ({"jwt": {"algorithms": []}}, "authorization.jwt.algorithms:"),
        ({"jwt": {"leeway_seconds": 3600}}, "authorization.jwt.leeway_seconds:"),
        ({"openshift": {"api_url": "ftp://x"}}, "authorization.openshift.api_url:"),
        (
            {"openshift": {"negative_cache_ttl_seconds": -1}},
            "authorization.openshift.negative_cache_ttl_seconds:",
        ),
        (
            {"openshift": {"negative_cache_max_entries": 0}},
            "authorization.openshift.negative_cache_max_entries:",
        ),
        ({"k8s": {"issuer": "http://k8s.example"}}, "authorization.k8s.issuer: issuer must"),
        ({"issuers": {}}, "authorization.issuers: unknown key"),
        ([], "authorization: Input should be a valid dictionary"),
    ],
)
def test_a_bad_setting_names_its_key(section: Any, expected: str) -> None:
    assert expected in error_of(section)


def test_types_is_accepted_with_a_deprecation_warning(caplog: pytest.LogCaptureFixture) -> None:
    rule = {"groups": ["a"], "permissions": ["read"], "types": ["mr"]}
    with caplog.at_level(logging.WARNING, logger="wq.daemon.auth.config"):
        section = parse_authorization(auth_config(rules_with(rule)), KNOWN_TYPES)
    assert section.rules[2].item_types == ["mr"]
    assert "authorization.rules[2]: `types` is deprecated" in caplog.text


# --------------------------------------------------------------------------- the environment


def test_group_rules_need_the_openshift_api() -> None:
    with pytest.raises(ConfigError) as caught:
        authenticator({"rules": [GOOD_RULES[0]]})
    assert str(caught.value) == (
        "config test.yml: authorization.rules[0]: group rules need the OpenShift API: set "
        "authorization.openshift.api_url, or run in a cluster"
    )


def test_the_k8s_issuer_needs_a_cluster() -> None:
    with pytest.raises(ConfigError) as caught:
        authenticator({"rules": [GOOD_RULES[2], GOOD_RULES[1]]})
    assert "authorization.rules[1]: the k8s issuer needs a cluster" in str(caught.value)


def test_an_explicit_ca_file_must_exist(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.crt")
    with pytest.raises(ConfigError) as caught:
        authenticator(
            {
                "rules": [GOOD_RULES[0]],
                "openshift": {"api_url": "https://api.example:6443", "ca_file": missing},
            }
        )
    assert f"authorization.openshift.ca_file: no such file: {missing}" in str(caught.value)


def test_tiers_follow_the_rules() -> None:
    auth = authenticator(
        {"rules": [GOOD_RULES[0], GOOD_RULES[2]], "openshift": {"api_url": "https://api:6443"}}
    )
    assert auth.tier_names == ["jwt", "ocp-user"]
    jwt_tier, openshift = auth.tiers
    assert isinstance(jwt_tier, JwtTier) and not jwt_tier.last
    assert isinstance(openshift, OpenShiftTier)
    auth.close()
    only_jwt = authenticator({"rules": [GOOD_RULES[2]]})
    assert only_jwt.tier_names == ["jwt"]
    assert isinstance(only_jwt.tiers[0], JwtTier) and only_jwt.tiers[0].last
    assert authenticator({}).tier_names == []


# --------------------------------------------------------------------------- wq config check


def write_config(tmp_path: Path, authorization: Any) -> Path:
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump({"authorization": authorization}))
    return path


def test_config_check_reports_a_bad_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {"issuer": GITLAB, "claims": {"sub": "x"}, "permissions": ["read"]}
    path = write_config(tmp_path, rules_with(bad))
    assert commands.config_check(str(path)) == commands.EXIT_FAILURE
    err = capsys.readouterr().err
    assert err.strip() == (
        f"wq: error: config {path}: authorization.rules[2]: "
        "an issuer rule must constrain aud in claims"
    )


def test_config_check_no_env_accepts_good_rules_meant_for_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Not in a cluster and no API URL: a plain check refuses as the daemon would here
    # (tests/daemon/test_config_check.py), but the file itself is valid for a pod.
    path = write_config(tmp_path, {"rules": GOOD_RULES})
    assert commands.config_check(str(path), no_env=True) == commands.EXIT_OK
    assert (
        capsys.readouterr().out.splitlines()[0] == f"{path}: structure ok (environment not checked)"
    )
