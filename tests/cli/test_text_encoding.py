"""Text a request cannot carry is refused with one line, never a traceback from httpx.

Bytes that are not UTF-8 in an argument or a variable reach Python as lone surrogates
(`$'\\xff'` is `'\\udcff'`), and so does JSON's `\\ud800` escape: neither can be encoded.
A token must fit in an HTTP header. Nothing here needs a server: the port is closed, so
a command that got as far as a request would exit 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.daemon import Result, base_env, cli_env, free_port, invoke, run
from wq.client.token_cache import TokenCache

NOT_UTF8 = "demo\udcff"  # what Python makes of the argument b"demo\xff"


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def assert_refused(result: Result, code: int, *words: str) -> None:
    assert result.code == code, result
    assert result.stdout == "", result
    assert "Traceback" not in result.stderr, result
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("wq: error: "), result
    assert all(line.startswith("hint: ") for line in lines[1:]) and len(lines) <= 2, result
    for word in words:
        assert word in lines[0], result


def submit_task(payload: str, cache_home: Path) -> Result:
    args = ["submit", "task", "--project", "demo", "--kind", "echo", "--payload", payload]
    return invoke([*args, "--url", closed_url()], cli_env(cache_home, WQ_TOKEN="t"))


def test_a_payload_with_a_lone_surrogate_escape_is_a_usage_error(cache_home: Path) -> None:
    result = submit_task('{"a": "\\ud800"}', cache_home)
    assert_refused(result, 2, "--payload", "not valid Unicode", "\\ud800")


def test_a_payload_argument_that_is_not_utf8_is_a_usage_error(cache_home: Path) -> None:
    result = submit_task('{"a": "\udcff"}', cache_home)
    assert_refused(result, 2, "--payload: not valid UTF-8 text")


def test_a_payload_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path, cache_home: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b'{"a": "\xff"}')
    result = submit_task(f"@{path}", cache_home)
    assert_refused(result, 2, f"--payload: {path} is not UTF-8 text")


def test_a_payload_file_whose_name_is_not_utf8_is_read(tmp_path: Path, cache_home: Path) -> None:
    # A local file's name need not be UTF-8: only what is sent must be.
    path = tmp_path / "p\udcff.json"
    path.write_text('{"a": 1}')
    result = submit_task(f"@{path}", cache_home)
    assert result.code == 1 and "cannot connect" in result.stderr, result


@pytest.mark.parametrize(
    "args",
    [
        ["status", "--project", NOT_UTF8],
        ["pools", "--project", NOT_UTF8],
        ["queue", "--project", NOT_UTF8],
        ["submit", "task", "--project", NOT_UTF8, "--kind", "echo"],
        ["retry", "--yes", "--project", NOT_UTF8],
        ["cancel", "--yes", "--project", NOT_UTF8],
        ["stats", "--project", NOT_UTF8],
    ],
)
def test_an_option_that_is_not_utf8_is_named(args: list[str], cache_home: Path) -> None:
    result = invoke([*args, "--url", closed_url()], cli_env(cache_home, WQ_TOKEN="t"))
    assert_refused(result, 2, "--project: not valid UTF-8 text")


def test_an_mr_file_path_that_is_not_utf8_is_named(tmp_path: Path, cache_home: Path) -> None:
    local = tmp_path / "sources"
    local.write_text("v2\n")
    args = ["submit", "mr", "--project", "g/p", "--source-branch", "b", "--title", "t"]
    args += ["--commit-message", "m", "--file", f"{local}:src\udcff", "--url", closed_url()]
    result = invoke(args, cli_env(cache_home, WQ_TOKEN="t"))
    assert_refused(result, 2, "--file", "not valid UTF-8 text")


def test_a_url_that_is_not_utf8_is_named(cache_home: Path) -> None:
    url = f"{closed_url()}/\udcff"
    assert_refused(invoke(["whoami"], cli_env(cache_home, WQ_URL=url)), 2, "WQ_URL")
    flag = invoke(["whoami", "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
    assert_refused(flag, 2, "--url: not valid UTF-8 text")


def test_an_argument_that_is_not_utf8_as_a_process(tmp_path: Path) -> None:
    # The real argv: bytes the shell passed, decoded by Python with surrogateescape.
    env = base_env(tmp_path, WQ_URL=closed_url(), WQ_TOKEN="t")
    result = run(["status", "--project", NOT_UTF8], env, tmp_path)
    assert_refused(result, 2, "--project: not valid UTF-8 text")


@pytest.mark.parametrize(
    ("variable", "token"),
    [
        ("WQ_TOKEN", "tökén"),
        ("WQ_TOKEN", "abc\ndef"),
        ("WQ_TOKEN", "abc def"),
        ("WORKQUEUE_SERVICE_TOKEN", "abc\udcff"),
    ],
)
def test_a_malformed_token_is_named_not_sent(variable: str, token: str, cache_home: Path) -> None:
    env = cli_env(cache_home, WQ_URL=closed_url(), **{variable: token})
    result = invoke(["whoami"], env)
    assert_refused(result, 4, f"the token in {variable} is malformed")
    assert "cannot reach" not in result.stderr and "cannot connect" not in result.stderr


@pytest.mark.parametrize("token", ["tökén", "abc\ndef", "abc\x01def", "abc def", "abc\udcff"])
def test_a_malformed_cached_token_is_named_not_sent(token: str, cache_home: Path) -> None:
    # It was sent: "cannot reach" for a line break, a traceback for a non-ASCII letter,
    # and a 401 from the server for a space or a control character.
    url = closed_url()
    path = TokenCache(cache_home / "wq" / "tokens").store(url, token)
    result = invoke(["whoami"], cli_env(cache_home, WQ_URL=url))
    assert_refused(result, 4, f"the cached token for {url} ({path}) is malformed")
    assert result.stderr.splitlines()[1] == f"hint: run `wq login` again, or delete {path}"
    assert "cannot reach" not in result.stderr and "cannot connect" not in result.stderr
    # The environment's token still comes first, as the cache is never read then.
    result = invoke(["whoami"], cli_env(cache_home, WQ_URL=url, WQ_TOKEN="t"))
    assert result.code == 1 and "cannot connect" in result.stderr, result
