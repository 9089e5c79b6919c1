"""The per-server token cache: 0600 files, expiry, one entry per server spelling."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from wq.client.credentials import Credentials, Token
from wq.client.errors import AuthenticationRequired
from wq.client.token_cache import TokenCache, cache_dir, loopback_alias


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_store_and_load_with_private_modes(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path / "tokens")
    path = cache.store("http://127.0.0.1:8080/", "secret-1")
    assert mode(path) == 0o600 and mode(tmp_path / "tokens") == 0o700
    entry = cache.load("HTTP://127.0.0.1:8080")  # the same server, spelled differently
    assert (
        entry is not None and entry.token == "secret-1" and entry.server == "http://127.0.0.1:8080"
    )
    assert cache.load("http://127.0.0.1:9090") is None
    assert [p.name for p in (tmp_path / "tokens").iterdir()] == [path.name]  # no temp files


def test_expired_and_broken_entries_are_ignored(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    cache.store("https://wq.example.com", "old", ttl_seconds=-1)
    assert cache.load("https://wq.example.com") is None
    cache.path_for("https://other").write_text("{not json")
    assert cache.load("https://other") is None
    cache.store("https://forever", "local", ttl_seconds=None)
    assert cache.load("https://forever").token == "local"  # type: ignore[union-attr]


def test_forget_only_removes_the_given_token(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    cache.store("http://h:1", "mine", ttl_seconds=None)
    cache.forget("http://h:1", token="someone-elses")
    assert cache.load("http://h:1") is not None
    cache.forget("http://h:1", token="mine")
    assert cache.load("http://h:1") is None
    cache.forget("http://h:1")  # already gone: fine


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "wq" / "tokens"


def test_a_replaced_token_is_never_seen_half_written(tmp_path: Path) -> None:
    # One writer replaces the token over and over while a reader loads it: every read
    # sees one whole token (the rename is atomic), never an empty or partial file.
    import threading

    cache = TokenCache(tmp_path)
    tokens = [f"token-{n}-" + "x" * 4000 for n in range(200)]
    cache.store("http://h:1", tokens[0])
    done = threading.Event()
    seen: list[str | None] = []

    def read() -> None:
        while not done.is_set():
            entry = cache.load("http://h:1")
            seen.append(None if entry is None else entry.token)

    reader = threading.Thread(target=read)
    reader.start()
    for token in tokens:
        cache.store("http://h:1", token)
    done.set()
    reader.join()
    assert seen and all(token in tokens for token in seen)
    assert [p.name for p in tmp_path.iterdir()] == [cache.path_for("http://h:1").name]


def test_the_directory_is_made_private_even_when_it_existed(tmp_path: Path) -> None:
    directory = tmp_path / "tokens"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    TokenCache(directory).store("http://h:1", "t")
    assert mode(directory) == 0o700


@pytest.mark.parametrize("ttl_seconds", [3600.0, None])  # a login's, the local daemon's
def test_a_token_written_over_a_world_readable_file_is_private(
    tmp_path: Path, ttl_seconds: float | None
) -> None:
    # A file made by hand or by an older version: the new token is not left 0644.
    cache = TokenCache(tmp_path / "tokens")
    path = cache.store("http://h:1", "old")
    path.chmod(0o644)
    assert cache.store("http://h:1", "new", ttl_seconds=ttl_seconds) == path
    assert mode(path) == 0o600
    entry = cache.load("http://h:1")
    assert entry is not None and entry.token == "new"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "is not JSON"),
        (b"[]", "is not a JSON object"),
        (b"\xff\xfe\x00garbage", "is not UTF-8 text"),
        (b'{"server": "https://wq", "token": 5}', "has no server and token"),
        (
            b'{"server": "https://wq", "token": "t", "expires_at": "garbage"}',
            "has an expiry that is not a time",
        ),
    ],
)
def test_a_cache_file_that_cannot_be_used_is_named_with_what_is_wrong(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    """It was ignored: the user was told to log in with Kerberos, never about the file."""
    cache = TokenCache(tmp_path)
    path = cache.path_for("https://wq")
    path.write_bytes(content)
    path.chmod(0o600)
    credentials = Credentials("https://wq", cache=cache, login=None, environ={})
    with pytest.raises(AuthenticationRequired) as refused:
        credentials.current()
    assert f"cannot be used: {path} {problem}" in refused.value.message
    assert f"delete {path}" in (refused.value.hint or "")
    # A login that works replaces it.
    healed = Credentials("https://wq", cache=cache, login=lambda _: "fresh", environ={})
    assert healed.current() == Token("fresh", "login")
    assert cache.problem("https://wq") is None
    assert cache.load("https://wq").token == "fresh"  # type: ignore[union-attr]


def test_a_missing_or_expired_cache_file_is_no_problem(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path)
    assert cache.problem("https://wq") is None
    cache.store("https://wq", "old", ttl_seconds=-1)
    assert cache.problem("https://wq") is None and cache.load("https://wq") is None


def test_the_local_daemons_token_is_found_as_localhost_too(tmp_path: Path) -> None:
    """The daemon writes it for 127.0.0.1: `WQ_URL=http://localhost:PORT` did not find it."""
    cache = TokenCache(tmp_path)
    cache.store("http://127.0.0.1:8080", "the-local-token", ttl_seconds=None)
    for url in ("http://localhost:8080", "http://LOCALHOST:8080/"):
        found = Credentials(url, cache=cache, login=None, environ={}).current()
        assert found == Token("the-local-token", "cache")
    # A login's token is not shared between spellings, nor with another port.
    cache.store("http://localhost:9090", "a-login")
    with pytest.raises(AuthenticationRequired):
        Credentials("http://127.0.0.1:9090", cache=cache, login=None, environ={}).current()
    with pytest.raises(AuthenticationRequired):
        Credentials("http://localhost:8081", cache=cache, login=None, environ={}).current()
    assert loopback_alias("https://wq.example.com") is None


@pytest.mark.parametrize("spoilt", ["readable by others", "expired", "not JSON"])
def test_a_localhost_login_that_cannot_be_used_is_not_replaced_by_the_local_token(
    tmp_path: Path, spoilt: str
) -> None:
    """Someone logged in as themselves at `localhost` whose file went bad is told so,
    not quietly given the local daemon's token (every permission, as `local`)."""
    cache = TokenCache(tmp_path)
    cache.store("http://127.0.0.1:8080", "the-local-token", ttl_seconds=None)
    path = cache.store("http://localhost:8080", "alices-login")
    if spoilt == "readable by others":
        path.chmod(0o644)
    elif spoilt == "expired":
        cache.store("http://localhost:8080", "alices-login", ttl_seconds=-1)
    else:
        path.write_text("{")
    with pytest.raises(AuthenticationRequired):
        Credentials("http://localhost:8080", cache=cache, login=None, environ={}).current()


def test_a_token_file_others_can_read_is_not_used(tmp_path: Path) -> None:
    """wq writes 0600: a file others can read has been changed, and its token may have
    been read; it is named, not used (as ssh refuses a key others can read)."""
    cache = TokenCache(tmp_path)
    path = cache.store("https://wq", "secret")
    path.chmod(0o644)
    assert cache.load("https://wq") is None
    assert (
        cache.problem("https://wq")
        == "can be read by others (mode 0644): chmod 600 it, or delete it"
    )


def test_a_token_goes_only_to_the_server_it_was_written_for(tmp_path: Path) -> None:
    """`https://wq.corp:8443` and `https://wq.corp/8443` share a file name."""
    cache = TokenCache(tmp_path)
    cache.store("https://wq.corp:8443", "for-8443")
    assert cache.path_for("https://wq.corp/8443") == cache.path_for("https://wq.corp:8443")
    assert cache.load("https://wq.corp/8443") is None
    assert cache.load("https://wq.corp:8443").token == "for-8443"  # type: ignore[union-attr]


@pytest.mark.parametrize("unsafe_mode", [0o777, 0o770, 0o702])
def test_a_directory_others_can_write_is_not_trusted(tmp_path: Path, unsafe_mode: int) -> None:
    """Only the file's mode was checked: in a directory others may write, any of them
    can replace or remove the token file, so none in it is used (and no login writes
    there) until it is private again; a login makes it so."""
    directory = tmp_path / "tokens"
    cache = TokenCache(directory)
    cache.store("https://wq", "secret")
    directory.chmod(unsafe_mode)
    assert cache.load("https://wq") is None
    login_calls: list[str] = []

    def login(server: str) -> str:
        login_calls.append(server)
        return "new"

    credentials = Credentials("https://wq", cache=cache, login=login, environ={})
    with pytest.raises(AuthenticationRequired) as refused:
        credentials.current()
    assert refused.value.message == (
        f"the token cache {directory} can be written by others (mode {unsafe_mode:04o}):"
        " no token in it is used"
    )
    assert refused.value.hint == f"chmod 700 {directory} (or set WQ_TOKEN)"
    assert login_calls == []
    # The environment's token needs no cache.
    found = Credentials("https://wq", cache=cache, login=None, environ={"WQ_TOKEN": "t"}).current()
    assert found == Token("t", "env", "WQ_TOKEN")
    # `wq login` writes a new token and makes the directory private again.
    assert Credentials("https://wq", cache=cache, login=lambda _: "fresh", environ={}).login()
    assert mode(directory) == 0o700 and cache.load("https://wq").token == "fresh"  # type: ignore[union-attr]


def test_another_users_directory_is_not_trusted_nor_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "tokens"
    cache = TokenCache(directory)
    cache.store("https://wq", "secret")
    owner = directory.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)  # as if another user made it
    assert cache.load("https://wq") is None
    assert cache.unsafe() == (
        f"the token cache {directory} belongs to uid {owner}, not to you",
        "set XDG_CACHE_HOME to a directory of your own",
    )
    with pytest.raises(PermissionError, match="belongs to uid"):
        cache.store("https://wq", "mine")
