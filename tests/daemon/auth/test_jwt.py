"""The JWT tier against a fake OIDC issuer with real keys: valid tokens, forged ones,
key rotation, the JWKS cache and its refetch on an unknown key id."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon.auth.conftest import AUD, Clock, authenticator
from tests.fakes.oidc import (
    DISCOVERY_PATH,
    FakeOidcIssuer,
    ec_key,
    forge_hs256,
    forge_unsigned,
    rsa_key,
)
from tests.fakes.openshift import FakeOpenShift
from tests.support.waiting import wait_for
from wq.daemon.auth import AuthenticationFailed, AuthenticationUnavailable, Authenticator
from wq.daemon.auth.oidc import FAILURE_MEMORY_SECONDS, MAX_FETCH_WAITERS

JWKS = "/jwks"


def section(issuer: FakeOidcIssuer, **jwt: Any) -> dict[str, Any]:
    return {
        "rules": [
            {"issuer": issuer.issuer, "claims": {"aud": AUD}, "permissions": ["read"]},
            {
                "issuer": issuer.issuer,
                "claims": {"aud": AUD, "sub": "deployer"},
                "permissions": ["submit"],
                "item_types": ["mr"],
            },
        ],
        "jwt": jwt,
    }


@pytest.fixture
def auth(fake_oidc: FakeOidcIssuer, clock: Clock) -> Iterator[Authenticator]:
    built = authenticator(section(fake_oidc), clock=clock)
    yield built
    built.close()


def refused(auth: Authenticator, token: str) -> str:
    with pytest.raises(AuthenticationFailed) as caught:
        auth.authenticate(token)
    return str(caught.value)


def test_a_valid_rsa_token(auth: Authenticator, fake_oidc: FakeOidcIssuer) -> None:
    principal = auth.authenticate(fake_oidc.token(sub="reader", aud=AUD))
    assert principal.identity == "reader"
    assert principal.tier == "jwt"
    assert principal.issuer == fake_oidc.issuer
    assert principal.allows("read", "mr") and not principal.allows("submit", "mr")
    assert principal.claims == {"iss": fake_oidc.issuer, "sub": "reader", "aud": AUD}


@pytest.mark.parametrize("alg", ["ES256", "ES384", "ES512"])
def test_a_valid_ec_token(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock, alg: str
) -> None:
    fake_oidc.add_key(ec_key(f"ec-{alg}", alg))
    principal = auth.authenticate(fake_oidc.token(sub="deployer", aud=[AUD, "other"]))
    assert principal.allows("submit", "mr") and principal.allows("read", "task")


def test_rsa_pss_and_a_token_without_kid(auth: Authenticator, fake_oidc: FakeOidcIssuer) -> None:
    fake_oidc.retire("rsa-1")
    fake_oidc.add_key(rsa_key("pss", "PS256"))
    assert auth.authenticate(fake_oidc.token(sub="a", aud=AUD)).identity == "a"
    # No kid: the issuer's only PS256 key is used.
    token = fake_oidc.token(sub="b", aud=AUD, headers={"kid": None})
    assert auth.authenticate(token).identity == "b"


# --------------------------------------------------------------------------- forged tokens


def test_a_tampered_payload_fails_the_signature(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    header, _, signature = fake_oidc.token(sub="reader", aud=AUD).split(".")
    _, payload, _ = fake_oidc.token(sub="deployer", aud=AUD, key=rsa_key("rsa-1")).split(".")
    assert "signature" in refused(auth, f"{header}.{payload}.{signature}")


def test_a_token_signed_by_another_key_with_a_known_kid(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    impostor = rsa_key("impostor")
    token = fake_oidc.token(sub="x", aud=AUD, key=impostor, headers={"kid": "rsa-1"})
    assert refused(auth, token) == "the token's signature is not valid"


def test_alg_none_is_refused(auth: Authenticator, fake_oidc: FakeOidcIssuer) -> None:
    token = forge_unsigned(fake_oidc.claims(sub="x", aud=AUD), kid="rsa-1")
    assert refused(auth, token) == "the token's algorithm 'none' is not accepted"


def test_hs256_signed_with_the_public_key_is_refused(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    claims = fake_oidc.claims(sub="x", aud=AUD)
    token = forge_hs256(claims, rsa_key("rsa-1").public_pem, kid="rsa-1")
    assert refused(auth, token) == "the token's algorithm 'HS256' is not accepted"


def test_an_algorithm_that_does_not_fit_the_key(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    # An ES256 signature claiming to be made by the RSA key.
    token = fake_oidc.token(sub="x", aud=AUD, key=ec_key("ec"), headers={"kid": "rsa-1"})
    assert "cannot verify ES256" in refused(auth, token)


def test_an_algorithm_left_out_of_the_allow_list(fake_oidc: FakeOidcIssuer, clock: Clock) -> None:
    auth = authenticator(section(fake_oidc, algorithms=["ES256"]), clock=clock)
    assert "'RS256' is not accepted" in refused(auth, fake_oidc.token(sub="x", aud=AUD))
    auth.close()


@pytest.mark.parametrize(
    "aud",
    [
        "other-service",
        ["a", "b"],
        None,
        # a Unicode lookalike of the accepted audience (long s for s)
        AUD.replace("s", "\u017f"),
        AUD.upper().replace("S", "\u017f"),
        [AUD.replace("s", "\u017f"), "other"],
    ],
)
def test_a_wrong_or_missing_audience(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, aud: Any
) -> None:
    token = fake_oidc.token(sub="x", aud=aud) if aud else fake_oidc.token(sub="x")
    assert "audience" in refused(auth, token)


def test_an_expired_token(auth: Authenticator, fake_oidc: FakeOidcIssuer) -> None:
    assert refused(auth, fake_oidc.token(sub="x", aud=AUD, lifetime=-60)) == (
        "the token has expired"
    )
    # Within the leeway (30 s by default) it still passes.
    assert auth.authenticate(fake_oidc.token(sub="x", aud=AUD, lifetime=-10))


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
def test_a_time_claim_that_is_not_a_number_is_refused(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, claim: str
) -> None:
    # PyJWT took a string of digits (`"exp": "1796000000"`) as the date it spells.
    now = int(time.time())
    valid = {"exp": now + 600, "nbf": now - 10, "iat": now - 10}
    token = fake_oidc.token(sub="x", aud=AUD, **{**valid, claim: str(valid[claim])})
    assert refused(auth, token) == f"the token's {claim!r} claim is not a number"
    assert auth.authenticate(fake_oidc.token(sub="x", aud=AUD, **valid))


@pytest.mark.parametrize("sub", [None, ""])
def test_a_token_must_name_its_subject(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, sub: Any
) -> None:
    # The subject is who acted in the audit trail (`jwt:<issuer>#<sub>`).
    token = fake_oidc.token(aud=AUD) if sub is None else fake_oidc.token(sub=sub, aud=AUD)
    assert refused(auth, token) == "the token names no subject (sub)"


def test_a_token_not_valid_yet(auth: Authenticator, fake_oidc: FakeOidcIssuer) -> None:
    now = int(time.time())
    token = fake_oidc.token(sub="x", aud=AUD, nbf=now + 120, exp=now + 600)
    assert refused(auth, token) == "the token is not valid yet (nbf/iat)"
    assert auth.authenticate(fake_oidc.token(sub="x", aud=AUD, nbf=now + 10))


def test_a_token_without_exp(auth: Authenticator, fake_oidc: FakeOidcIssuer) -> None:
    assert refused(auth, fake_oidc.token(sub="x", aud=AUD, drop=("exp",))) == (
        "the token has no 'exp' claim"
    )


def test_a_wrong_issuer_signed_with_our_issuers_key(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    # The iss names a second issuer that the rules also accept, but our issuer's key
    # signed it: the second issuer has no such key.
    with FakeOidcIssuer() as other:
        other.add_key(rsa_key("other-1"))
        rules = section(fake_oidc)["rules"] + section(other)["rules"]
        both = authenticator({"rules": rules})
        token = fake_oidc.token(sub="x", aud=AUD, iss=other.issuer)
        assert refused(both, token) == f"issuer {other.issuer} has no key 'rsa-1'"
        both.close()


def test_an_issuer_no_rule_names(auth: Authenticator) -> None:
    with FakeOidcIssuer() as stranger:
        stranger.add_key(rsa_key("stranger"))
        token = stranger.token(sub="x", aud=AUD)
        assert refused(auth, token) == f"no rule accepts tokens from issuer {stranger.issuer!r}"
        assert stranger.requests == []  # never asked for its keys


def test_an_issuer_no_rule_names_goes_to_openshift_when_it_is_a_tier(
    fake_oidc: FakeOidcIssuer, fake_openshift: FakeOpenShift
) -> None:
    auth = authenticator({**section(fake_oidc), "openshift": {"api_url": fake_openshift.url}})
    with FakeOidcIssuer() as stranger:
        stranger.add_key(rsa_key("stranger"))
        token = stranger.token(sub="x", aud=AUD)
        assert refused(auth, token) == "the OpenShift API does not accept the token"
        assert fake_openshift.lookups == 1
        # A JWT from our issuer never reaches OpenShift.
        assert auth.authenticate(fake_oidc.token(sub="y", aud=AUD)).tier == "jwt"
        assert fake_openshift.lookups == 1
    auth.close()


def test_not_a_jwt(auth: Authenticator) -> None:
    for token in ("opaque-token", "a.b.c", "sha256~abc"):
        assert refused(auth, token) == "the token is not valid for this server"


# --------------------------------------------------------------------------- keys and caching


def test_an_unknown_kid_refetches_once_then_fails(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock
) -> None:
    ghost = fake_oidc.token(sub="x", aud=AUD, headers={"kid": "ghost"})
    assert "has no key" in refused(auth, ghost)
    assert fake_oidc.count(JWKS) == 1  # just fetched: no point fetching again
    clock.advance(30)
    assert refused(auth, ghost) == f"issuer {fake_oidc.issuer} has no key 'ghost'"
    assert fake_oidc.count(JWKS) == 2  # one refetch
    # Another forged kid right away does not make the issuer serve its keys again...
    assert "has no key" in refused(auth, ghost)
    assert fake_oidc.count(JWKS) == 2
    # ...but after the refetch interval (10 s by default) it may.
    clock.advance(10)
    assert "has no key" in refused(auth, ghost)
    assert fake_oidc.count(JWKS) == 3
    assert fake_oidc.count(DISCOVERY_PATH) == 1


def test_key_rotation(auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock) -> None:
    old_token = fake_oidc.token(sub="x", aud=AUD)
    assert auth.authenticate(old_token)
    clock.advance(60)
    fake_oidc.add_key(ec_key("ec-2"))  # published and signing from now on
    assert auth.authenticate(fake_oidc.token(sub="y", aud=AUD)).identity == "y"
    assert fake_oidc.count(JWKS) == 2  # the new kid was fetched once
    assert auth.authenticate(old_token)  # the old key is still published
    fake_oidc.retire("rsa-1")
    assert auth.authenticate(old_token)  # cached until the lifespan ends
    clock.advance(300)
    assert "has no key 'rsa-1'" in refused(auth, old_token)
    assert auth.authenticate(fake_oidc.token(sub="z", aud=AUD))


def test_the_jwks_is_cached_for_its_lifespan(fake_oidc: FakeOidcIssuer, clock: Clock) -> None:
    auth = authenticator(section(fake_oidc, jwks_lifespan_seconds=60), clock=clock)
    token = fake_oidc.token(sub="x", aud=AUD)
    for _ in range(5):
        auth.authenticate(token)
    assert (fake_oidc.count(DISCOVERY_PATH), fake_oidc.count(JWKS)) == (1, 1)
    clock.advance(59)
    auth.authenticate(token)
    assert fake_oidc.count(JWKS) == 1
    clock.advance(1)
    auth.authenticate(token)
    assert (fake_oidc.count(DISCOVERY_PATH), fake_oidc.count(JWKS)) == (2, 2)
    auth.close()


def test_discovery_must_name_the_configured_issuer(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    fake_oidc.discovery_issuer = "https://evil.example.com"
    with pytest.raises(AuthenticationUnavailable) as caught:
        auth.authenticate(fake_oidc.token(sub="x", aud=AUD))
    assert "names issuer 'https://evil.example.com'" in str(caught.value)
    assert fake_oidc.count(JWKS) == 0


def test_an_unreachable_issuer(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock
) -> None:
    token = fake_oidc.token(sub="x", aud=AUD)
    fake_oidc.fail_next(DISCOVERY_PATH, 502)
    with pytest.raises(AuthenticationUnavailable) as caught:
        auth.authenticate(token)
    assert "HTTP 502" in str(caught.value)
    clock.advance(FAILURE_MEMORY_SECONDS)  # the failure answers the next second's callers
    assert auth.authenticate(token)  # fetched now
    # Once keys are held, an issuer outage keeps them in use past their lifespan.
    clock.advance(301)
    fake_oidc.stop()
    assert auth.authenticate(token).identity == "x"


def outcome(auth: Authenticator, token: str) -> str:
    """What authenticating `token` came to: the identity, or the refusal's message."""
    try:
        return auth.authenticate(token).identity
    except (AuthenticationFailed, AuthenticationUnavailable) as err:
        return str(err)


def in_threads(count: int, work: Any) -> tuple[list[threading.Thread], list[Any]]:
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(work())) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, results


def test_callers_with_no_keys_share_one_fetch_and_its_failure(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock
) -> None:
    """An issuer that hangs, then fails: the callers waiting meanwhile get its failure,
    not a fetch (and a timeout) each, one after another."""
    token = fake_oidc.token(sub="x", aud=AUD)
    fake_oidc.fail_next(DISCOVERY_PATH, 502)
    fake_oidc.gate = threading.Event()
    threads, results = in_threads(1 + MAX_FETCH_WAITERS, lambda: outcome(auth, token))
    wait_for(lambda: fake_oidc.count(DISCOVERY_PATH) == 1, message="the discovery fetch")
    time.sleep(0.2)  # the other callers come meanwhile
    fake_oidc.gate.set()
    for thread in threads:
        thread.join(timeout=10)
    assert len(results) == 1 + MAX_FETCH_WAITERS, results
    assert all("HTTP 502" in result for result in results), results
    assert fake_oidc.count(DISCOVERY_PATH) == 1
    assert "HTTP 502" in outcome(auth, token)  # remembered for a second
    assert fake_oidc.count(DISCOVERY_PATH) == 1
    clock.advance(FAILURE_MEMORY_SECONDS)
    assert outcome(auth, token) == "x"


def test_a_fetch_that_hangs_holds_no_other_caller_for_long(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    """With no keys held, callers coming while a fetch hangs are told to try again
    after a short wait, not held (each with a request thread) until it times out."""
    token = fake_oidc.token(sub="x", aud=AUD)
    fake_oidc.gate = threading.Event()
    try:
        first, _ = in_threads(1, lambda: outcome(auth, token))
        wait_for(lambda: fake_oidc.count(DISCOVERY_PATH) == 1, message="the discovery fetch")
        assert (
            outcome(auth, token) == f"the keys of issuer {fake_oidc.issuer} are still being fetched"
        )
    finally:
        fake_oidc.gate.set()
    first[0].join(timeout=10)
    assert outcome(auth, token) == "x"


def test_callers_beyond_the_few_waiting_for_a_fetch_are_answered_at_once(
    auth: Authenticator, fake_oidc: FakeOidcIssuer
) -> None:
    """Every token naming an issuer whose fetch hangs (no signature is needed for that)
    held a request thread for up to `FETCH_WAIT_SECONDS`: two dozen such callers held
    all of them. Beyond `MAX_FETCH_WAITERS`, a caller is answered without waiting."""
    token = fake_oidc.token(sub="x", aud=AUD)
    fake_oidc.gate = threading.Event()
    try:
        waiting, results = in_threads(1 + MAX_FETCH_WAITERS, lambda: outcome(auth, token))
        wait_for(lambda: fake_oidc.count(DISCOVERY_PATH) == 1, message="the discovery fetch")
        time.sleep(0.2)  # the waiters are waiting
        late, late_results = in_threads(1, lambda: outcome(auth, token))
        time.sleep(0.3)  # well within FETCH_WAIT_SECONDS: a waiter would still wait
    finally:
        fake_oidc.gate.set()
    for thread in [*waiting, *late]:
        thread.join(timeout=10)
    assert late_results == [f"the keys of issuer {fake_oidc.issuer} are still being fetched"]
    assert results == ["x"] * (1 + MAX_FETCH_WAITERS)


def test_an_issuer_failing_again_and_again_is_asked_less_and_less_often(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock
) -> None:
    """Each failure in a row is remembered twice as long: tokens naming a dead issuer
    do not start a fetch (and its timeout) every second."""
    token = fake_oidc.token(sub="x", aud=AUD)
    fake_oidc.fail_next(DISCOVERY_PATH, 502, count=3)
    for wait in (0, FAILURE_MEMORY_SECONDS, 2 * FAILURE_MEMORY_SECONDS):
        clock.advance(wait)
        assert "HTTP 502" in outcome(auth, token)
    assert fake_oidc.count(DISCOVERY_PATH) == 3
    clock.advance(2 * FAILURE_MEMORY_SECONDS)  # the third failure is remembered for 4 s
    assert "HTTP 502" in outcome(auth, token)
    assert fake_oidc.count(DISCOVERY_PATH) == 3
    clock.advance(2 * FAILURE_MEMORY_SECONDS)
    assert outcome(auth, token) == "x"


def test_a_held_key_is_used_while_a_refetch_hangs(
    auth: Authenticator, fake_oidc: FakeOidcIssuer, clock: Clock
) -> None:
    """A forged key id makes the source fetch the keys again; while the issuer hangs on
    that fetch, callers whose key is held are answered from what is held."""
    valid = fake_oidc.token(sub="x", aud=AUD)
    assert outcome(auth, valid) == "x"
    clock.advance(30)  # a refetch is allowed again
    fake_oidc.gate = threading.Event()
    forged, forged_results = in_threads(
        1, lambda: outcome(auth, fake_oidc.token(sub="y", aud=AUD, headers={"kid": "ghost"}))
    )
    wait_for(lambda: fake_oidc.count(JWKS) == 2, message="the refetch")
    others, results = in_threads(3, lambda: outcome(auth, valid))
    for thread in others:
        thread.join(timeout=5)
    assert results == ["x", "x", "x"]  # answered while the refetch still hangs
    assert forged[0].is_alive()
    fake_oidc.gate.set()
    forged[0].join(timeout=10)
    assert "has no key 'ghost'" in forged_results[0]
