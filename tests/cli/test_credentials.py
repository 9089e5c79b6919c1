"""Credentials against a real daemon: env precedence, the cache, one re-login on 401.

The login step is a parameter of `Credentials` (Kerberos by default, tested end to end
in test_kerberos.py); here it is a function that returns tokens the fake OpenShift API
knows, so the retry logic runs against real 401s from a real daemon.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.cli.daemon import RunningDaemon, cli_env, free_port, invoke
from wq.client.api import ApiClient
from wq.client.credentials import Credentials
from wq.client.errors import AuthenticationRequired
from wq.client.token_cache import TokenCache


class CountingTransport(httpx.HTTPTransport):
    """A real transport that counts the requests per path."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return super().handle_request(request)


class Login:
    """Hands out the given tokens in order and counts the calls."""

    def __init__(self, *tokens: str) -> None:
        self.tokens = list(tokens)
        self.calls: list[str] = []

    def __call__(self, server: str) -> str:
        self.calls.append(server)
        return self.tokens.pop(0)


def make_client(
    daemon: RunningDaemon, cache: TokenCache, login: Login | None, **environ: str
) -> tuple[ApiClient, CountingTransport]:
    transport = CountingTransport()
    credentials = Credentials(daemon.url, environ=environ, cache=cache, login=login)
    return ApiClient(daemon.url, credentials=credentials, transport=transport), transport


# --------------------------------------------------------------------------- re-login


def test_a_rejected_cached_token_logs_in_once_and_retries_once(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    cache = TokenCache(tmp_path)
    stale = daemon.openshift.add_user("ada", ["admins"])
    daemon.openshift.revoke(stale)
    cache.store(daemon.url, stale)
    fresh = daemon.openshift.add_user("ada", ["admins"])
    login = Login(fresh)
    api, transport = make_client(daemon, cache, login)
    with api:
        assert api.whoami()["authentication"]["identity"] == "ada"
        assert api.whoami()["authentication"]["identity"] == "ada"  # no second login
    assert len(login.calls) == 1
    assert transport.paths == ["/api/whoami"] * 3  # 401, the retry, the next call
    entry = cache.load(daemon.url)
    assert entry is not None and entry.token == fresh  # the new token replaced the old


def test_a_login_whose_token_is_rejected_never_loops(daemon: RunningDaemon, tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    cache.store(daemon.url, "sha256~stale")
    login = Login("sha256~also-rejected", "sha256~never-used")
    api, transport = make_client(daemon, cache, login)
    with api, pytest.raises(AuthenticationRequired) as raised:
        api.whoami()
    assert "rejected your login" in raised.value.message
    assert len(login.calls) == 1 and transport.paths == ["/api/whoami"] * 2
    assert cache.load(daemon.url) is None  # a rejected token is not kept
    with api, pytest.raises(AuthenticationRequired):
        api.whoami()  # and later calls do not log in again
    assert len(login.calls) == 1


def test_a_token_another_process_cached_meanwhile_is_used_without_login(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    cache = TokenCache(tmp_path)
    stale = "sha256~stale"
    cache.store(daemon.url, stale)
    login = Login()
    api, transport = make_client(daemon, cache, login)
    with api:
        api.credentials.current()  # resolved: the stale token
        cache.store(daemon.url, daemon.reader)  # e.g. `wq login` in another terminal
        # The stale one is still what this client holds; its 401 finds the new one.
        assert api.whoami()["authentication"]["identity"] == "rita"
    assert login.calls == [] and transport.paths == ["/api/whoami"] * 2


def test_a_rejected_env_token_is_not_replaced(daemon: RunningDaemon, tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    cache.store(daemon.url, daemon.admin)  # would work, but the env token wins
    login = Login(daemon.admin)
    api, transport = make_client(daemon, cache, login, WQ_TOKEN="sha256~bad")
    with api, pytest.raises(AuthenticationRequired) as raised:
        api.whoami()
    assert "WQ_TOKEN" in raised.value.message
    assert login.calls == [] and transport.paths == ["/api/whoami"]


def test_without_any_token_the_login_runs_first(daemon: RunningDaemon, tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    login = Login(daemon.reader)
    api, _ = make_client(daemon, cache, login)
    with api:
        assert api.whoami()["authentication"]["identity"] == "rita"
    assert login.calls == [daemon.url]
    entry = cache.load(daemon.url)
    assert entry is not None and entry.token == daemon.reader and entry.expires_at is not None


def test_no_token_and_no_login_says_how_to_log_in(daemon: RunningDaemon, tmp_path: Path) -> None:
    api, transport = make_client(daemon, TokenCache(tmp_path), None)
    with api, pytest.raises(AuthenticationRequired) as raised:
        api.whoami()
    assert raised.value.exit_code == 4 and "wq login" in (raised.value.hint or "")
    assert transport.paths == []  # nothing was sent


# --------------------------------------------------------------------------- precedence


def who(daemon: RunningDaemon, cache_home: Path, *args: str, **env: str | None) -> str:
    result = invoke(["whoami", *args], cli_env(cache_home, **env))
    assert result.code == 0, result
    return result.stdout.strip()


def test_url_precedence(daemon: RunningDaemon, cache_home: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    token = daemon.admin
    assert who(daemon, cache_home, WQ_URL=daemon.url, WORKQUEUE_SERVICE_URL=dead, WQ_TOKEN=token)
    assert who(daemon, cache_home, WORKQUEUE_SERVICE_URL=daemon.url, WQ_TOKEN=token)
    assert who(daemon, cache_home, "--url", daemon.url, WQ_URL=dead, WQ_TOKEN=token)
    refused = invoke(
        ["whoami"],
        cli_env(cache_home, WQ_URL=dead, WORKQUEUE_SERVICE_URL=daemon.url, WQ_TOKEN=token),
    )
    assert refused.code == 1 and dead in refused.stderr


def test_token_precedence(daemon: RunningDaemon, cache_home: Path) -> None:
    url = daemon.url
    both = who(daemon, cache_home, WQ_URL=url, WQ_TOKEN=daemon.admin,
               WORKQUEUE_SERVICE_TOKEN=daemon.reader)  # fmt: skip
    assert both == "ada"
    assert who(daemon, cache_home, WQ_URL=url, WORKQUEUE_SERVICE_TOKEN=daemon.reader) == "rita"
    # The cache is used when no variable is set, and a variable beats it.
    TokenCache(cache_home / "wq" / "tokens").store(url, daemon.reader)
    assert who(daemon, cache_home, WQ_URL=url) == "rita"
    assert who(daemon, cache_home, WQ_URL=url, WQ_TOKEN=daemon.admin) == "ada"


def test_the_local_daemons_own_token_is_found_in_the_cache(daemon: RunningDaemon) -> None:
    # The laptop case: the daemon wrote its token where the CLI looks for it.
    identity = who(daemon, daemon.root / "cache", "--url", daemon.url + "/")
    assert identity == "local"


def test_logout_leaves_the_local_daemons_own_token(daemon: RunningDaemon) -> None:
    # Removing it locked every command out until the daemon restarted.
    cache_home = daemon.root / "cache"
    result = invoke(["logout", "--url", daemon.url], cli_env(cache_home))
    # Refused (5), as the documented exit codes say; it exited 1, a failure.
    assert result.code == 5 and result.stdout == "", result
    assert result.stderr.splitlines() == [
        f"wq: error: that is the local daemon's own token for {daemon.url}; it is removed "
        "when the daemon stops",
        "hint: to send no credentials, use --no-auth",
    ], result
    assert who(daemon, cache_home, "--url", daemon.url) == "local"


def test_logout_removes_only_that_servers_token(daemon: RunningDaemon, cache_home: Path) -> None:
    cache = TokenCache(cache_home / "wq" / "tokens")
    cache.store(daemon.url, daemon.reader)
    cache.store("https://other.example", "other")
    result = invoke(["logout", "--url", daemon.url], cli_env(cache_home))
    assert result.code == 0 and f"Logged out of {daemon.url}" in result.stdout
    assert cache.load(daemon.url) is None and cache.load("https://other.example") is not None
    again = invoke(["logout"], cli_env(cache_home, WQ_URL=daemon.url))
    assert again.code == 0 and "Not logged in" in again.stdout
    # And with nothing cached, the next call has no credentials.
    assert invoke(["pools"], cli_env(cache_home, WQ_URL=daemon.url)).code == 4


def test_a_token_cache_others_can_write_is_refused(daemon: RunningDaemon, cache_home: Path) -> None:
    directory = cache_home / "wq" / "tokens"
    TokenCache(directory).store(daemon.url, daemon.reader)
    directory.chmod(0o777)
    result = invoke(["whoami"], cli_env(cache_home, WQ_URL=daemon.url))
    assert (result.code, result.stdout) == (4, ""), result
    assert result.stderr.splitlines() == [
        f"wq: error: the token cache {directory} can be written by others (mode 0777):"
        " no token in it is used",
        f"hint: chmod 700 {directory} (or set WQ_TOKEN)",
    ], result
    directory.chmod(0o700)
    assert who(daemon, cache_home, WQ_URL=daemon.url) == "rita"


def test_logout_removes_the_token_a_killed_local_daemon_left(
    cache_home: Path, daemon: RunningDaemon
) -> None:
    # A daemon killed with SIGKILL cannot remove its token: logout refused it for good.
    cache = TokenCache(cache_home / "wq" / "tokens")
    gone = f"http://127.0.0.1:{free_port()}"
    cache.store(gone, "left-behind", ttl_seconds=None)
    result = invoke(["logout", "--url", gone], cli_env(cache_home))
    assert result.code == 0, result
    assert result.stdout == f"Removed the token of the local daemon that ran at {gone}\n"
    assert cache.load(gone) is None
    # Another server at that address, which refuses the token, is not that daemon either.
    cache.store(daemon.url, "left-behind", ttl_seconds=None)
    assert invoke(["logout", "--url", daemon.url], cli_env(cache_home)).code == 0
    assert cache.load(daemon.url) is None
