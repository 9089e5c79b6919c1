"""`wq login` over Kerberos end to end: a real MIT KDC, a SPNEGO proxy, a real daemon.

k5test builds a throwaway realm (KDC on 127.0.0.1) with a user and the proxy's service
principal `HTTP/127.0.0.1`; `tests/fakes/spnego_proxy.py` accepts the SPNEGO login with
gssapi and exchanges its session for an OpenShift token the daemon checks against the
fake OpenShift API. `wq` runs as a real process with the realm's environment. Missing
Kerberos pieces fail these tests (never skip): `.ci/run` installs them.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.daemon import RunningDaemon, base_env, run, running_daemon
from tests.fakes.spnego_proxy import SpnegoProxy
from tests.support.waiting import wait_for
from wq.client.token_cache import TokenCache

SERVICE = "HTTP/127.0.0.1"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """One SQLite daemon is enough here: the login is what is tested."""
    root = tmp_path_factory.mktemp("daemon-kerberos")
    with running_daemon(root, f"sqlite:///{root / 'wq.db'}", "sqlite") as running:
        yield running


def _free_port_base() -> int:
    """A base port with the next ten ports free (k5test uses base .. base+9)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base > 65000:
            continue
        try:
            sockets = []
            for offset in range(10):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", base + offset))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise AssertionError("no ten free consecutive ports on 127.0.0.1")


@pytest.fixture(scope="module")
def realm() -> Iterator[Any]:
    """A throwaway MIT Kerberos realm on loopback with a user and the proxy's key."""
    from k5test import K5Realm

    loopback = {
        "kdc": "127.0.0.1:$port0",
        "admin_server": "127.0.0.1:$port1",
        "kpasswd_server": "127.0.0.1:$port2",
    }
    realm = K5Realm(
        portbase=_free_port_base(),
        krb5_conf={
            # The service name is HTTP@127.0.0.1, as the URL says: no DNS rewriting.
            "libdefaults": {"dns_canonicalize_hostname": "false", "rdns": "false"},
            "realms": {"$realm": loopback},
        },
        kdc_conf={
            "realms": {
                "$realm": {"kdc_listen": "127.0.0.1:$port0", "kdc_tcp_listen": "127.0.0.1:$port0"}
            }
        },
        create_host=False,
        get_creds=False,
    )
    try:
        principal = f"{SERVICE}@{realm.realm}"
        realm.addprinc(principal)
        realm.extract_keytab(principal, realm.keytab)
        yield realm
    finally:
        realm.stop()


@pytest.fixture
def proxy(
    realm: Any, daemon: RunningDaemon, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SpnegoProxy]:
    """The OAuth proxy in front of the daemon; it mints an admin token per principal."""
    import gssapi

    # The proxy runs in this process and reads its key from the realm's keytab.
    for name in ("KRB5_CONFIG", "KRB5_KTNAME", "KRB5RCACHEDIR"):
        monkeypatch.setenv(name, realm.env[name])

    def mint(principal: str) -> str:
        return daemon.openshift.add_user(principal.split("@")[0], ["admins"])

    acceptor = gssapi.Credentials(usage="accept")
    with SpnegoProxy(daemon.url, mint, acceptor=acceptor) as running:
        yield running


def kerberos_env(
    realm: Any, root: Path, *, ticket: bool = True, lifetime: str | None = None, **extra: str
) -> dict[str, str]:
    """A process environment in the realm; with a fresh ticket for `user`, or none."""
    ccache = root / ("ccache" if ticket else "no-ticket")
    env = base_env(
        root,
        KRB5_CONFIG=realm.env["KRB5_CONFIG"],
        KRB5CCNAME=f"FILE:{ccache}",
        **extra,
    )
    if ticket:
        flags = ["-l", lifetime] if lifetime else None
        realm.kinit(realm.user_princ, realm.password("user"), flags=flags, env={**realm.env, **env})
    return env


def cached(root: Path, url: str) -> str | None:
    entry = TokenCache(root / "cache" / "wq" / "tokens").load(url)
    return None if entry is None else entry.token


def test_login_and_whoami_with_a_ticket(realm: Any, proxy: SpnegoProxy, tmp_path: Path) -> None:
    env = kerberos_env(realm, tmp_path)
    login = run(["login", "--url", proxy.url], env, tmp_path)
    assert login.code == 0, login
    assert login.stdout == f"Logged in to {proxy.url} as user\n"
    assert proxy.principals == [f"user@{realm.realm}"]
    # The token is cached (0600) and never printed.
    token = cached(tmp_path, proxy.url)
    assert token and token not in login.stdout + login.stderr
    (path,) = (tmp_path / "cache" / "wq" / "tokens").glob("*.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["expires_at"] is not None

    whoami = run(["whoami", "--url", proxy.url], env, tmp_path)
    assert (whoami.code, whoami.stdout) == (0, "user\n"), whoami
    assert len(proxy.principals) == 1  # the cached token, no second login


def test_whoami_logs_in_by_itself_when_nothing_is_cached(
    realm: Any, proxy: SpnegoProxy, tmp_path: Path
) -> None:
    env = kerberos_env(realm, tmp_path, WQ_URL=proxy.url)
    whoami = run(["whoami", "-o", "json"], env, tmp_path)
    assert whoami.code == 0, whoami
    assert whoami.json()["authentication"] == {
        "tier": "ocp-user",
        "identity": "user",
        "groups": ["admins"],
    }
    assert len(proxy.principals) == 1 and cached(tmp_path, proxy.url)


def test_a_rejected_cached_token_is_replaced_by_one_new_login(
    realm: Any, proxy: SpnegoProxy, daemon: RunningDaemon, tmp_path: Path
) -> None:
    stale = daemon.openshift.add_user("user", ["admins"])
    daemon.openshift.revoke(stale)
    TokenCache(tmp_path / "cache" / "wq" / "tokens").store(proxy.url, stale)
    env = kerberos_env(realm, tmp_path)
    whoami = run(["whoami", "--url", proxy.url], env, tmp_path)
    assert (whoami.code, whoami.stdout) == (0, "user\n"), whoami
    assert len(proxy.principals) == 1
    assert cached(tmp_path, proxy.url) not in (None, stale)


def test_without_a_ticket_login_and_whoami_exit_4(
    realm: Any, proxy: SpnegoProxy, tmp_path: Path
) -> None:
    env = kerberos_env(realm, tmp_path, ticket=False)
    for args in (["login", "--url", proxy.url], ["whoami", "--url", proxy.url]):
        result = run(args, env, tmp_path)
        assert result.code == 4, result
        assert result.stdout == "" and "Traceback" not in result.stderr
        assert "no Kerberos ticket" in result.stderr and "kinit" in result.stderr
    assert proxy.principals == [] and cached(tmp_path, proxy.url) is None


def test_an_expired_ticket_is_exit_4(realm: Any, proxy: SpnegoProxy, tmp_path: Path) -> None:
    env = kerberos_env(realm, tmp_path, lifetime="2s")

    def expired() -> bool:
        klist = subprocess.run(["klist", "-s"], env=env, check=False, timeout=30)
        return klist.returncode != 0

    wait_for(expired, timeout=60, interval=0.5, message="the 2 s ticket to expire")
    result = run(["login", "--url", proxy.url], env, tmp_path)
    assert result.code == 4, result
    assert "your Kerberos ticket has expired" in result.stderr and "kinit" in result.stderr
    assert proxy.principals == [] and cached(tmp_path, proxy.url) is None


def test_a_proxy_that_refuses_kerberos_is_exit_4(
    realm: Any, proxy: SpnegoProxy, tmp_path: Path
) -> None:
    proxy.refuse_spnego = True
    result = run(["login", "--url", proxy.url], kerberos_env(realm, tmp_path), tmp_path)
    assert result.code == 4, result
    assert "refused the Kerberos login (HTTP 401" in result.stderr
    assert cached(tmp_path, proxy.url) is None


def test_a_session_the_token_endpoint_rejects_is_exit_4(
    realm: Any, proxy: SpnegoProxy, tmp_path: Path
) -> None:
    proxy.reject_sessions = True
    result = run(["login", "--url", proxy.url], kerberos_env(realm, tmp_path), tmp_path)
    assert result.code == 4, result
    assert "/oauth/token did not accept the login session" in result.stderr
    assert cached(tmp_path, proxy.url) is None


def test_without_the_extra_login_says_what_to_install(
    daemon: RunningDaemon, realm: Any, tmp_path: Path
) -> None:
    # Hide requests_gssapi as an install without the extra would.
    hidden = tmp_path / "hide" / "requests_gssapi"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        "raise ImportError(\"No module named 'requests_gssapi'\", name='requests_gssapi')\n"
    )
    path = os.pathsep.join(filter(None, [str(tmp_path / "hide"), os.environ.get("PYTHONPATH")]))
    env = kerberos_env(realm, tmp_path, PYTHONPATH=path)
    login = run(["login", "--url", daemon.url], env, tmp_path)
    assert login.code == 4, login
    assert "requests_gssapi is missing" in login.stderr
    assert "pip install 'wq[kerberos]'" in login.stderr and "libkrb5-dev" in login.stderr
    # Everything else keeps working.
    whoami = run(["whoami", "--url", daemon.url], {**env, "WQ_TOKEN": daemon.admin}, tmp_path)
    assert (whoami.code, whoami.stdout) == (0, "ada\n"), whoami
