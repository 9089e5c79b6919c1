"""Bad input found before any request: one `wq: error:` line and a hint, exit 2.

Click's own "Usage: ... Error: ..." box, a payload Python's json reads but JSON does not
have (NaN, 1e999), a payload nested 100,000 deep, a port out of range: each used to
print a traceback or a box of its own. Nothing here needs a server.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.daemon import Result, base_env, cli_env, free_port, invoke, run


def assert_usage(result: Result, *words: str) -> None:
    assert result.code == 2, result
    assert result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result
    assert lines[0].startswith("wq: error: ") and lines[1].startswith("hint: "), result
    for word in words:
        assert word in lines[0], result


def submit(payload: str, cache_home: Path) -> Result:
    # A closed port: anything that got as far as a request would exit 1, not 2.
    url = f"http://127.0.0.1:{free_port()}"
    args = ["submit", "task", "--project", "p", "--kind", "k", "--payload", payload]
    return invoke([*args, "--url", url], cli_env(cache_home, WQ_TOKEN="t"))


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": 1e999}', "1e999 is out of the range of a JSON number"),
        ('{"a": ' + "9" * 5000 + "}", "is out of the range of a JSON number"),
    ],
)
def test_a_payload_json_does_not_allow_is_a_usage_error(
    payload: str, said: str, cache_home: Path
) -> None:
    result = submit(payload, cache_home)
    assert_usage(result, "--payload", said)
    assert result.stderr.splitlines()[1] == "hint: see wq submit task --help"


def test_a_payload_file_with_an_infinite_number(tmp_path: Path, cache_home: Path) -> None:
    path = tmp_path / "payload.json"
    path.write_text('{"size": 1e999}')
    assert_usage(submit(f"@{path}", cache_home), "1e999 is out of the range of a JSON number")


def test_an_at_without_a_file_name_or_an_empty_file_says_so(
    tmp_path: Path, cache_home: Path
) -> None:
    """`@` alone read `cannot read : Is a directory`; an empty file `not JSON:
    Expecting value`."""
    assert_usage(submit("@", cache_home), "@ needs a file name after it")
    empty = tmp_path / "empty.json"
    empty.write_text("\n")
    assert_usage(submit(f"@{empty}", cache_home), f"{empty} is empty")


@pytest.mark.parametrize("depth", [129, 100_000])
def test_a_payload_nested_too_deep_is_a_usage_error(
    depth: int, tmp_path: Path, cache_home: Path
) -> None:
    path = tmp_path / "payload.json"
    path.write_text('{"a": ' + "[" * depth + "]" * depth + "}")
    assert_usage(submit(f"@{path}", cache_home), "--payload: nested deeper than 128 levels")


@pytest.mark.parametrize(
    ("args", "said", "command"),
    [
        (["status", "--bogus-flag"], "no such option: --bogus-flag", "wq status"),
        (["status", "-o", "xml"], "--output: 'xml' is not one of", "wq status"),
        (["status", "--interval", "nan", "--watch"], "--interval: must be a number", "wq status"),
        (["pools", "--interval", "inf", "--watch"], "--interval: must be a number", "wq pools"),
        (["status", "--limit", "many"], "--limit: must be a valid integer", "wq status"),
        (["config", "check"], "missing argument 'path' (or -c file)", "wq config check"),
        (["config", "check", "a.yml", "-c", "b.yml"], "two config files named", "wq config check"),
        (["daemon", "--port", "99999"], "--port: must be less than or equal to 65535", "wq daemon"),
        (["daemon", "--port", "-1"], "--port: must be greater than or equal to 0", "wq daemon"),
        (["bogus"], "no such command 'bogus'", "wq"),
    ],
)
def test_click_usage_errors_are_one_line_and_a_hint(
    args: list[str], said: str, command: str, cache_home: Path
) -> None:
    result = invoke(args, cli_env(cache_home))
    assert_usage(result, said)
    assert result.stderr.splitlines()[1] == f"hint: see {command} --help"


def test_a_port_out_of_range_as_a_process(tmp_path: Path) -> None:
    # The daemon must refuse before it binds, logs or opens a database.
    result = run(["daemon", "--port", "99999"], base_env(tmp_path), tmp_path)
    assert_usage(result, "--port")
    assert "Traceback" not in result.stderr


def test_a_group_alone_still_prints_its_help(cache_home: Path) -> None:
    result = invoke(["db"], cli_env(cache_home))
    assert result.code == 2 and "migrate" in result.stderr + result.stdout, result


@pytest.mark.parametrize(
    "url",
    [
        "not-a-url",
        "wq.example.com",
        "wq.example.com:443",
        "ftp://x",
        # These two were tracebacks (Invalid IPv6 URL; httpx's Invalid IPv4 address).
        "http://[::1",
        "http://256.1.1.1:80",
        "http://exa mple",
    ],
)
def test_a_url_without_a_scheme_is_a_usage_error(url: str, cache_home: Path) -> None:
    result = invoke(["status", "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
    assert_usage(result, f"--url {url!r}: not a URL")
    env_result = invoke(["whoami"], cli_env(cache_home, WQ_URL=url))
    assert_usage(env_result, f"WQ_URL {url!r}: not a URL")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080?x=1", "http://127.0.0.1:8080/#frag", "https://wq.x/?"]
)
def test_a_query_or_fragment_in_the_url_is_a_usage_error(url: str, cache_home: Path) -> None:
    """They were taken, and then failed as "not logged in": the token cache is keyed on
    the server's URL, which has none."""
    result = invoke(["status", "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
    assert_usage(result, "a server's URL has no ?query or #fragment")


@pytest.mark.parametrize(
    "url", ["http://u:secretpw@127.0.0.1:8080", "u:secretpw@127.0.0.1:8080", "https://tok@wq.x"]
)
def test_a_password_in_the_url_is_refused_and_never_echoed(url: str, cache_home: Path) -> None:
    """`--url http://u:secretpw@host` was taken, and every error repeated the password
    (`cannot connect to http://u:secretpw@...`); wq sends a token, never these."""
    for args, env in (
        (["whoami", "--url", url], cli_env(cache_home, WQ_TOKEN="t")),
        (["status"], cli_env(cache_home, WQ_TOKEN="t", WQ_URL=url)),
    ):
        result = invoke(args, env)
        assert_usage(result, "a user name or password in the URL is not used by wq")
        assert "secretpw" not in result.stderr and "tok@" not in result.stderr, result


def test_a_loopback_host_and_port_may_omit_the_scheme(cache_home: Path) -> None:
    port = free_port()
    result = invoke(["status", "--url", f"127.0.0.1:{port}"], cli_env(cache_home, WQ_TOKEN="t"))
    assert result.code == 1, result  # tried http://127.0.0.1:PORT, found nobody there
    assert f"cannot connect to http://127.0.0.1:{port}" in result.stderr, result


@pytest.mark.parametrize("command", ["status", "queue", "stats", "pools", "retry", "cancel"])
def test_an_empty_project_is_a_usage_error_everywhere(command: str, cache_home: Path) -> None:
    """`--project ""` was every project in `wq queue`, no item in `wq status` and a 422
    in `wq stats`; an empty `--url` is a usage error, and so is this."""
    url = f"http://127.0.0.1:{free_port()}"
    result = invoke([command, "--project", "", "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
    assert_usage(result, "--project: an empty project name")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["status", "--id", ""], "an empty id is not an item id"),
        (["status", "--id", "../pools"], "'../pools' is not an item id"),
        (["retry", "--id", "not-a-uuid"], "'not-a-uuid' is not an item id"),
        (["cancel", "2f6c1a", "x y"], "'x y' is not an item id"),
        # A pasted page is not repeated whole, and a long one is said to be too long.
        (["status", "--id", "a" * 100_000], f"'{'a' * 40}'… is not an item id: 100000 hex"),
        (["status", "--id", "f" * 33], "33 hex digits, an id has 32"),
    ],
)
def test_a_malformed_id_is_a_usage_error_before_any_request(
    args: list[str], said: str, cache_home: Path
) -> None:
    # A closed port: a request would exit 1 (it used to be "server error 307").
    url = f"http://127.0.0.1:{free_port()}"
    result = invoke([*args, "--url", url], cli_env(cache_home, WQ_TOKEN="t"))
    assert_usage(result, said)
    assert len(result.stderr) < 300, result.stderr[:300]


@pytest.mark.parametrize("command", ["retry", "cancel"])
def test_naming_nothing_suggests_only_the_commands_own_selectors(
    command: str, cache_home: Path
) -> None:
    # `wq cancel` alone used to suggest `--phase`, which only `wq retry` has.
    result = invoke([command], cli_env(cache_home, WQ_TOKEN="t"))
    assert_usage(result, f"name at least one item (wq {command} --id ID) or select them")
    suggested = result.stderr.splitlines()[0].rsplit("(", 1)[1].rstrip(")").split(", ")
    help_text = invoke([command, "--help"], cli_env(cache_home)).stdout
    assert suggested and all(f"  {option} " in help_text for option in suggested), result
    assert ("--phase" in suggested) is (command == "retry")


@pytest.mark.parametrize("command", ["retry", "cancel"])
def test_an_older_than_the_api_refuses_is_said_in_the_options_terms(
    command: str, cache_home: Path
) -> None:
    # The server's answer named its own field, in seconds (`older_than_seconds: ...`).
    url = f"http://127.0.0.1:{free_port()}"  # a request would exit 1, not 2
    args = [command, "--older-than", "99999d", "--yes", "--url", url]
    assert_usage(invoke(args, cli_env(cache_home, WQ_TOKEN="t")), "--older-than: at most 3650d")


def test_the_older_than_bound_is_the_apis() -> None:
    from wq.cli.bulk import MAX_OLDER_THAN_DAYS
    from wq.daemon.routers.bulk import RetryRequest

    limit = RetryRequest.model_json_schema()["properties"]["older_than_seconds"]["anyOf"][0]
    assert limit["maximum"] == MAX_OLDER_THAN_DAYS * 86400


@pytest.mark.parametrize("url", ["", "  "])
@pytest.mark.parametrize("command", [["status"], ["submit"], ["retry", "--id", "2f6c1a"]])
def test_an_empty_url_is_refused_not_replaced(
    url: str, command: list[str], cache_home: Path
) -> None:
    # `--url "$UNSET"` used to fall back to WQ_URL (or the default) without a word.
    fallback = f"http://127.0.0.1:{free_port()}"  # used, it would exit 1
    result = invoke([*command, "--url", url], cli_env(cache_home, WQ_URL=fallback, WQ_TOKEN="t"))
    assert_usage(result, "--url: an empty URL")


def _capped_memory() -> None:  # in the child: a read without a bound fails, not the machine
    resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))


def run_capped(args: list[str], env: dict[str, str], cwd: Path) -> Result:
    """`python -m wq ARGS` in a process whose memory is capped at 2 GiB."""
    proc = subprocess.run(
        [sys.executable, "-m", "wq", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_capped_memory,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["submit", "task", "--project", "p", "--kind", "k", "--payload", "@/dev/zero"],
            "--payload: /dev/zero is larger than 64 MiB",
        ),
        (
            [
                *("submit", "mr", "--project", "g/r", "--title", "T"),
                *("--commit-message", "M", "--source-branch", "wq/z", "--create", "/dev/zero:x"),
            ],
            "--create: /dev/zero is larger than 64 MiB",
        ),
        (
            ["ci-retry", "explain", "-c", "/dev/zero", "--trace", "/dev/null"],
            "-c: /dev/zero is larger than 64 MiB",
        ),
    ],
)
def test_a_file_without_end_is_refused_not_read_into_memory(
    args: list[str], said: str, tmp_path: Path
) -> None:
    """`--payload @/dev/zero` (or a huge file named by mistake) was read whole: the
    process grew until the kernel killed it (22 GB), or a MemoryError traceback."""
    url = f"http://127.0.0.1:{free_port()}"
    env = base_env(tmp_path, WQ_URL=url, WQ_TOKEN="t")
    assert_usage(run_capped(args, env, tmp_path), said)


def test_a_config_without_end_is_refused_naming_the_file(tmp_path: Path) -> None:
    result = run_capped(["config", "check", "-c", "/dev/zero"], base_env(tmp_path), tmp_path)
    assert result.code == 1, result
    assert result.stderr.strip() == "wq: error: config /dev/zero: larger than 16 MiB", result
