"""The OpenShift tier against a fake `users/~`: identity and groups, the TTL cache (hit,
miss, expiry, on an injected clock), refused tokens remembered briefly in a bounded
negative cache, oversized tokens refused unseen, an unreachable API is a 503."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon.auth.conftest import Clock, authenticator
from tests.fakes.openshift import USERS_TILDE, FakeOpenShift
from wq.daemon.auth import AuthenticationFailed, AuthenticationUnavailable, Authenticator
from wq.daemon.auth.openshift_tier import OpenShiftTier, TtlCache

RULES = [
    {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
    {"groups": ["devs"], "permissions": ["read"], "item_types": ["mr"]},
]


def section(api: FakeOpenShift, **openshift: Any) -> dict[str, Any]:
    return {"rules": RULES, "openshift": {"api_url": api.url, **openshift}}


@pytest.fixture
def auth(fake_openshift: FakeOpenShift, clock: Clock) -> Iterator[Authenticator]:
    built = authenticator(section(fake_openshift), clock=clock)
    yield built
    built.close()


def tier_of(auth: Authenticator) -> OpenShiftTier:
    (tier,) = auth.tiers
    assert isinstance(tier, OpenShiftTier)
    return tier


def test_identity_and_groups(auth: Authenticator, fake_openshift: FakeOpenShift) -> None:
    token = fake_openshift.add_user("alice", ["devs", "system:authenticated"])
    principal = auth.authenticate(token)
    assert (principal.identity, principal.tier) == ("alice", "ocp-user")
    assert list(principal.groups) == ["devs", "system:authenticated"]
    assert principal.allows("read", "mr") and not principal.allows("read", "task")
    assert principal.rules == ({"groups": ["devs"], "permissions": ["read"], "item_types": ["mr"]},)
    (request,) = fake_openshift.requests
    assert (request.method, request.path, request.bearer) == ("GET", USERS_TILDE, token)


def test_a_user_without_groups_is_authenticated_with_no_permissions(
    auth: Authenticator, fake_openshift: FakeOpenShift
) -> None:
    principal = auth.authenticate(fake_openshift.add_user("bob", groups=None))
    assert principal.identity == "bob" and list(principal.groups) == []
    assert principal.permissions == {}


def test_cache_hit_miss_and_expiry(
    auth: Authenticator, fake_openshift: FakeOpenShift, clock: Clock
) -> None:
    alice = fake_openshift.add_user("alice", ["admins"])
    bob = fake_openshift.add_user("bob", ["devs"])
    assert auth.authenticate(alice).identity == "alice"
    assert fake_openshift.lookups == 1
    clock.advance(299)
    assert auth.authenticate(alice).identity == "alice"  # hit
    assert fake_openshift.lookups == 1
    assert auth.authenticate(bob).identity == "bob"  # another token: miss
    assert fake_openshift.lookups == 2
    clock.advance(1)
    assert auth.authenticate(alice).identity == "alice"  # expired: looked up again
    assert fake_openshift.lookups == 3


def test_a_revoked_token_works_until_its_entry_expires(
    auth: Authenticator, fake_openshift: FakeOpenShift, clock: Clock
) -> None:
    token = fake_openshift.add_user("alice", ["admins"])
    auth.authenticate(token)
    fake_openshift.revoke(token)
    assert auth.authenticate(token).identity == "alice"
    clock.advance(300)
    with pytest.raises(AuthenticationFailed, match="OpenShift API does not accept"):
        auth.authenticate(token)


def test_a_refused_token_is_remembered_briefly(
    auth: Authenticator, fake_openshift: FakeOpenShift, clock: Clock
) -> None:
    token = "sha256~not-yet"
    for _ in range(5):
        with pytest.raises(AuthenticationFailed, match="OpenShift API does not accept"):
            auth.authenticate(token)
    assert fake_openshift.lookups == 1  # the repeats cost no lookup
    fake_openshift.add_user("late", ["admins"], token=token)
    clock.advance(9)
    with pytest.raises(AuthenticationFailed, match="OpenShift API does not accept"):
        auth.authenticate(token)
    assert fake_openshift.lookups == 1
    clock.advance(1)  # the negative TTL (10 s) is over: looked up again, now valid
    assert auth.authenticate(token).identity == "late"
    assert fake_openshift.lookups == 2
    assert len(tier_of(auth).cache) == 1
    assert tier_of(auth).rejected.keys() == []


def test_a_403_is_remembered_like_a_401(auth: Authenticator, fake_openshift: FakeOpenShift) -> None:
    token = fake_openshift.add_user("scoped", ["admins"])
    fake_openshift.fail_next(USERS_TILDE, 403)
    for _ in range(2):
        with pytest.raises(AuthenticationFailed, match="may not read its own user"):
            auth.authenticate(token)
    assert fake_openshift.lookups == 1


def test_the_negative_cache_is_bounded_and_keeps_hashes(fake_openshift: FakeOpenShift) -> None:
    clock = Clock()
    auth = authenticator(section(fake_openshift, negative_cache_max_entries=3), clock=clock)
    tokens = [f"sha256~unknown-{index}" for index in range(5)]
    for token in tokens:
        with pytest.raises(AuthenticationFailed):
            auth.authenticate(token)
    rejected = tier_of(auth).rejected
    assert rejected.keys() == [hashlib.sha256(t.encode()).hexdigest() for t in tokens[2:]]
    assert fake_openshift.lookups == 5
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(tokens[-1])  # still remembered
    with pytest.raises(AuthenticationFailed):
        auth.authenticate(tokens[0])  # pushed out: looked up again
    assert fake_openshift.lookups == 6
    auth.close()


def test_a_zero_negative_ttl_remembers_nothing(fake_openshift: FakeOpenShift) -> None:
    auth = authenticator(section(fake_openshift, negative_cache_ttl_seconds=0))
    for _ in range(2):
        with pytest.raises(AuthenticationFailed):
            auth.authenticate("sha256~unknown")
    assert fake_openshift.lookups == 2
    auth.close()


def test_an_oversized_token_is_refused_before_any_lookup(
    auth: Authenticator, fake_openshift: FakeOpenShift
) -> None:
    for size in (8193, 64 * 1024):
        with pytest.raises(AuthenticationFailed, match="longer than 8192 characters"):
            auth.authenticate("a" * size)
    assert fake_openshift.lookups == 0
    # At the bound, a token is still looked up.
    token = fake_openshift.add_user("long", ["admins"], token="b" * 8192)
    assert auth.authenticate(token).identity == "long"


def test_the_cache_holds_hashes_not_tokens(
    auth: Authenticator, fake_openshift: FakeOpenShift
) -> None:
    token = fake_openshift.add_user("alice", ["admins"])
    auth.authenticate(token)
    assert tier_of(auth).cache.keys() == [hashlib.sha256(token.encode()).hexdigest()]


def test_a_403_is_a_401(auth: Authenticator, fake_openshift: FakeOpenShift) -> None:
    token = fake_openshift.add_user("scoped", ["admins"])
    fake_openshift.fail_next(USERS_TILDE, 403)
    with pytest.raises(AuthenticationFailed, match="may not read its own user"):
        auth.authenticate(token)


@pytest.mark.parametrize("status", [500, 502, 404, 429])
def test_an_api_error_is_unavailable_and_not_cached(
    auth: Authenticator, fake_openshift: FakeOpenShift, status: int
) -> None:
    token = fake_openshift.add_user("alice", ["admins"])
    fake_openshift.fail_next(USERS_TILDE, status)
    with pytest.raises(AuthenticationUnavailable) as caught:
        auth.authenticate(token)
    assert str(caught.value) == (
        f"cannot check the token: the OpenShift API at {fake_openshift.url} answered HTTP {status}"
    )
    assert token not in str(caught.value)
    assert auth.authenticate(token).identity == "alice"


def test_an_unreachable_api(auth: Authenticator, fake_openshift: FakeOpenShift) -> None:
    token = fake_openshift.add_user("alice", ["admins"])
    fake_openshift.stop()
    with pytest.raises(AuthenticationUnavailable) as caught:
        auth.authenticate(token)
    assert f"the OpenShift API at {fake_openshift.url} is unreachable" in str(caught.value)
    fake_openshift.start()
    assert auth.authenticate(token).identity == "alice"


def test_a_slow_api_times_out(fake_openshift: FakeOpenShift) -> None:
    auth = authenticator(section(fake_openshift, timeout_seconds=0.1))
    token = fake_openshift.add_user("alice", ["admins"])
    fake_openshift.delay = 0.4
    with pytest.raises(AuthenticationUnavailable, match="timed out"):
        auth.authenticate(token)
    auth.close()


@pytest.mark.parametrize(
    "body", [{"metadata": {}}, {"metadata": {"name": "a"}, "groups": "admins"}, ["x"]]
)
def test_an_unexpected_answer_is_unavailable(
    auth: Authenticator, fake_openshift: FakeOpenShift, body: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake_openshift, "handle", lambda request: (200, body, {}))
    with pytest.raises(AuthenticationUnavailable, match="unexpected users/~ answer"):
        auth.authenticate("sha256~x")


def test_a_malformed_token_is_refused_without_a_lookup(
    auth: Authenticator, fake_openshift: FakeOpenShift
) -> None:
    for token in ("two words", "tab\there", "ünïcode"):
        with pytest.raises(AuthenticationFailed, match="malformed"):
            auth.authenticate(token)
    assert fake_openshift.lookups == 0


def test_a_zero_ttl_disables_the_cache(fake_openshift: FakeOpenShift) -> None:
    auth = authenticator(section(fake_openshift, cache_ttl_seconds=0))
    token = fake_openshift.add_user("alice", ["admins"])
    auth.authenticate(token)
    auth.authenticate(token)
    assert fake_openshift.lookups == 2
    auth.close()


def test_ttl_cache_bounds_its_size() -> None:
    clock = Clock()
    cache: TtlCache[int] = TtlCache(ttl=10, max_entries=3, clock=clock)
    for index in range(3):
        cache.put(f"k{index}", index)
    clock.advance(5)
    cache.put("k3", 3)  # full, none expired: the oldest goes
    assert cache.keys() == ["k1", "k2", "k3"]
    clock.advance(5)  # k1, k2 expire now; k3 has 5 s left
    cache.put("k4", 4)
    assert cache.keys() == ["k3", "k4"]
    assert cache.get("k3") == 3 and cache.get("k1") is None
