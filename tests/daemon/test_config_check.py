"""`wq config check` refuses what `wq daemon` refuses and says what a start would warn of.

Both run as real subprocesses: the check first, then the daemon on the same file, so
that a config the check passes is one a start takes (and the other way round).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.daemon.test_daemon_process import clean_env, error_lines, run_wq, wq_args, write

START_TIMEOUT = 30.0  # a refused start ends at once; one that is not is stopped here


def refused_start(config: Path, env: dict[str, str], cwd: Path) -> str:
    """The one line a `wq daemon` start on this config is refused with."""
    try:
        result = subprocess.run(
            wq_args("daemon", "--config", str(config), "--port", "0"),
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the daemon started on {config}") from None
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    return error_lines(result.stderr)[-1]


# A webhook secret and two projects' tokens, each named by an environment variable.
NEEDS_THREE_VARIABLES = (
    "events:\n  webhook_secret_env: HOOK_SECRET\n"
    "handled_types:\n  mr:\n    projects:\n"
    "      org/a: {token_env: TOKEN_A}\n      org/b: {token_env: TOKEN_B}\n"
)


def test_config_check_warns_of_a_task_program_missing_on_this_host(tmp_path: Path) -> None:
    # A task of that kind could never start here: say so before a deployment finds out.
    config = write(
        tmp_path / "agents.yml",
        "handled_types:\n  task:\n"
        "    runners:\n      command:\n        workdir: /srv/no-such-checkouts\n"
        "    kinds:\n"
        "      agent:\n        scope: project\n"
        "        command: [/usr/local/bin/no-such-agent, run]\n"
        "      shell:\n        scope: project\n        command: [sh, -c, 'true']\n",
    )
    result = run_wq("config", "check", str(config), env=clean_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "wq: warning: handled_types.task.runners.command.workdir: directory "
        "'/srv/no-such-checkouts' not found on this host",
        "wq: warning: handled_types.task.kinds.agent.command: program "
        "'/usr/local/bin/no-such-agent' not found on this host",
    ], result.stderr


def test_config_check(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    good = write(
        tmp_path / "good.yml",
        "server:\n  host: 127.0.0.1\n  port: 9000\n"
        "processing:\n  workers: 3\n  shutdown_grace_seconds: 5\n"
        "pools:\n  default:\n    capacity: 4\n  group/team:\n    capacity: 2\n"
        "    alert_capacity: 1\n    queued_autonomous_cap: 3\n",
    )
    bad = write(tmp_path / "bad.yml", "pools:\n  default:\n    capacity: -1\n")
    unknown = write(tmp_path / "unknown.yml", "processing:\n  wrokers: 3\n")
    # Checked, not started: the daemon would have sized its worker pool by it.
    huge = write(tmp_path / "huge.yml", "processing:\n  workers: 100000000000000000000000\n")
    missing = tmp_path / "missing.yml"
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"\xff\xfepools: {}\n")  # UTF-16 or garbage, not UTF-8

    result = run_wq("config", "check", str(good), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert str(good) in result.stdout and "ok" in result.stdout
    # Named as `wq daemon -c` and `wq db migrate -c` name it, too.
    result = run_wq("config", "check", "-c", str(good), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert str(good) in result.stdout and "ok" in result.stdout

    for path, key in [
        (bad, "pools.default.capacity"),
        (unknown, "processing.wrokers"),
        (huge, "processing.workers: Input should be less than or equal to 256"),
        (missing, "cannot read"),
        (binary, "not UTF-8 text"),
    ]:
        result = run_wq("config", "check", str(path), env=env, cwd=tmp_path)
        assert result.returncode != 0, (path, result.stdout)
        lines = error_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert str(path) in lines[0]
        assert key in lines[0]
    # Nothing was started or created.
    assert not (tmp_path / "data").exists()


def test_config_check_without_the_environment_lists_what_a_start_needs(tmp_path: Path) -> None:
    config = write(tmp_path / "wq.yml", NEEDS_THREE_VARIABLES)
    # Even with one of them set here: a structure check ignores this environment.
    env = clean_env(tmp_path, TOKEN_A="set-on-this-laptop")
    plain = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
    assert plain.returncode != 0
    assert "HOOK_SECRET" in plain.stderr
    structure = run_wq("config", "check", "--no-env", str(config), env=env, cwd=tmp_path)
    assert structure.returncode == 0, structure.stderr
    assert "a real start needs: HOOK_SECRET, TOKEN_A, TOKEN_B" in structure.stdout
    # A structural error is still an error.
    broken = write(tmp_path / "broken.yml", "handled_types:\n  mr:\n    projcts: {}\n")
    result = run_wq("config", "check", "--no-env", str(broken), env=env, cwd=tmp_path)
    assert result.returncode != 0
    assert "handled_types.mr.projcts" in result.stderr


def test_config_check_refuses_what_a_start_on_this_host_refuses(tmp_path: Path) -> None:
    # Group rules need the OpenShift API, which is neither configured nor a pod's here;
    # the k8s issuer needs a cluster or an issuer. Each is refused by the check with the
    # daemon's own line.
    env = clean_env(tmp_path)
    database = f"database_url: sqlite:///{tmp_path / 'wq.db'}\nhandled_types: {{}}\n"
    groups = write(
        tmp_path / "groups.yml",
        database + "authorization:\n  rules:\n"
        "    - groups: [queue-admins]\n      permissions: [read]\n",
    )
    k8s = write(
        tmp_path / "k8s.yml",
        database + "authorization:\n  rules:\n"
        "    - issuer: k8s\n      claims: {aud: wq}\n      permissions: [read]\n",
    )
    for config, reason in [
        (groups, "group rules need the OpenShift API"),
        (k8s, "the k8s issuer needs a cluster"),
    ]:
        check = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
        assert check.returncode == 1, check.stdout
        (line,) = error_lines(check.stderr)
        assert reason in line and "authorization.rules[0]" in line
        assert refused_start(config, env, cwd=tmp_path) == line
    # In a pod the same rules are fine (the API server is the cluster's).
    in_pod = clean_env(tmp_path, KUBERNETES_SERVICE_HOST="10.0.0.1")
    check = run_wq("config", "check", str(groups), env=in_pod, cwd=tmp_path)
    assert check.returncode == 0, check.stderr


def test_config_check_names_every_unset_variable_at_once(tmp_path: Path) -> None:
    config = write(tmp_path / "wq.yml", NEEDS_THREE_VARIABLES)
    env = clean_env(tmp_path, TOKEN_A="set-here")
    result = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
    assert result.returncode == 1
    assert error_lines(result.stderr) == [
        f"wq: error: config {config}: environment variables not set: "
        "HOOK_SECRET (events.webhook_secret_env), "
        "TOKEN_B (handled_types.mr.projects.org/b.token_env)"
    ]


def test_a_secret_with_a_trailing_newline_is_refused_by_its_key_without_its_value(
    tmp_path: Path,
) -> None:
    # A Kubernetes Secret made from a file keeps the file's newline: sent in a header,
    # the HTTP library refused it with an error quoting the token, which the item's
    # error, its audit rows and the log then kept.
    config = write(tmp_path / "wq.yml", NEEDS_THREE_VARIABLES)
    secrets = {"HOOK_SECRET": "hook-value", "TOKEN_A": "glpat-aaaa", "TOKEN_B": "glpat-bbbb"}
    for variable, key in (
        ("TOKEN_B", "handled_types.mr.projects.org/b.token_env"),
        ("HOOK_SECRET", "events.webhook_secret_env"),
    ):
        env = clean_env(tmp_path, **{**secrets, variable: secrets[variable] + "\n"})
        check = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
        assert check.returncode == 1, check.stdout
        said = (
            f"wq: error: config {config}: {key}: environment variable {variable} holds a"
            " space or control character (a trailing newline?)"
        )
        assert error_lines(check.stderr) == [said]
        assert refused_start(config, env, cwd=tmp_path) == said
        assert secrets[variable] not in check.stderr + check.stdout
    # A space inside is a header value's own (docs/configuration.md): taken.
    env = clean_env(tmp_path, **{**secrets, "HOOK_SECRET": "hook value"})
    check = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
    assert check.returncode == 0, check.stderr


def test_aliases_within_aliases_are_refused_before_anything_walks_them(tmp_path: Path) -> None:
    # Nine aliases of nine aliases, seven deep, in a kind's payload schema: 4.8 million
    # schemas once expanded, which the schema's own check walked for hours.
    levels = ["        a0: &a0 {type: string}"] + [
        f"        a{n}: &a{n} {{anyOf: [{', '.join([f'*a{n - 1}'] * 9)}]}}" for n in range(1, 8)
    ]
    config = write(
        tmp_path / "bomb.yml",
        "handled_types:\n  task:\n    kinds:\n      x:\n        scope: project\n"
        "        command: [sh, -c, 'true']\n        payload_schema:\n"
        "          type: object\n          properties:\n"
        + "\n".join("    " + level for level in levels)
        + "\n",
    )
    env = clean_env(tmp_path)
    try:
        check = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        raise AssertionError("wq config check still walking the expanded document") from None
    assert check.returncode == 1, check.stdout
    assert error_lines(check.stderr) == [
        f"wq: error: config {config}: not valid YAML: more than 1,000,000 values once its"
        " aliases are expanded"
    ]


@pytest.mark.parametrize(
    "text",
    ["a: " + "[" * 5000 + "]" * 5000 + "\n", "".join(f"{' ' * n}k:\n" for n in range(3000))],
    ids=["flow", "block"],
)
def test_a_config_nested_too_deeply_is_one_line(tmp_path: Path, text: str) -> None:
    # The parser recursed until Python's limit: every command reading it printed a
    # RecursionError's traceback of thousands of lines.
    config = write(tmp_path / "deep.yml", text)
    check = run_wq("config", "check", str(config), env=clean_env(tmp_path), cwd=tmp_path)
    assert check.returncode == 1, check.stdout
    assert error_lines(check.stderr) == [
        f"wq: error: config {config}: not valid YAML: nested too deeply"
        " (real configs nest a few levels)"
    ]
    assert "Traceback" not in check.stderr


def test_config_check_says_what_a_start_would_warn_of(tmp_path: Path) -> None:
    # A file for replicas (listening on every address) without a database, and without
    # handled types: the daemon starts, warning of both; the check says the same first.
    config = write(tmp_path / "wq.yml", "server:\n  host: 0.0.0.0\n")
    env = clean_env(tmp_path)
    result = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert error_lines(result.stderr) == [
        f"wq: warning: config {config} has no handled_types: this daemon handles no work-item type",
        f"wq: warning: config {config} has no database_url (nor WQ_DATABASE_URL): this "
        "daemon uses a SQLite file of its own, which no other replica shares",
    ]
    # Given the database by the environment, as a deployment does: no warning of it.
    shared = clean_env(tmp_path, WQ_DATABASE_URL=f"sqlite:///{tmp_path / 'shared.db'}")
    result = run_wq("config", "check", str(config), env=shared, cwd=tmp_path)
    assert "database_url" not in result.stderr
    # On loopback, one machine's daemon: its own SQLite file is what it is meant to use.
    local = write(tmp_path / "local.yml", "server:\n  host: 127.0.0.1\nhandled_types: {}\n")
    result = run_wq("config", "check", str(local), env=env, cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""


def test_the_database_commands_do_not_need_the_webhook_secret_a_start_does(
    tmp_path: Path,
) -> None:
    """`wq db migrate` refused a config naming a webhook secret variable that was not
    set, so a migration Job had to be given the secret (it never uses it), while the
    types' token variables were not asked for."""
    config = write(
        tmp_path / "wq.yml",
        f"database_url: sqlite:///{tmp_path / 'wq.db'}\n"
        "events: {webhook_secret_env: HOOK_SECRET}\n"
        "handled_types: {task: {}}\n",
    )
    env = clean_env(tmp_path)
    migrated = run_wq("db", "migrate", "-c", str(config), env=env, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    current = run_wq("db", "current", "-c", str(config), env=env, cwd=tmp_path)
    assert current.returncode == 0, current.stderr
    said = (
        f"wq: error: config {config}: events.webhook_secret_env: environment variable"
        " HOOK_SECRET is not set"
    )
    assert refused_start(config, env, cwd=tmp_path) == said
    check = run_wq("config", "check", str(config), env=env, cwd=tmp_path)
    assert check.returncode == 1
    assert error_lines(check.stderr) == [
        f"wq: error: config {config}: environment variable not set: "
        "HOOK_SECRET (events.webhook_secret_env)"
    ]
