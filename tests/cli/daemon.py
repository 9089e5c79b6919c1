"""A real `wq daemon` subprocess on loopback for the CLI tests, and how to run `wq`.

The daemon handles the `mr` type against a fake GitLab and authenticates OpenShift
tokens against a fake OpenShift API (both in the test process), plus its local token.
It keeps its token cache to itself: tests hand credentials to the CLI explicitly.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from typer.testing import CliRunner

from tests.fakes.gitlab import FakeGitLab
from tests.fakes.openshift import FakeOpenShift
from wq.cli.main import app

STARTUP_DEADLINE = 60.0
COMMAND_TIMEOUT = 60.0
GITLAB_TOKEN_ENV = "WQ_TEST_GITLAB_TOKEN"
GITLAB_TOKEN = "glpat-cli-test-token"
PROJECT = "group/project"  # exists on the fake GitLab; the `group` token may write it
BLOCKED = "group/blocked"  # a pool of capacity 0: its items stay queued

# Everything of the caller's environment that would change what `wq` does.
WQ_VARIABLES = (
    "WQ_URL",
    "WQ_TOKEN",
    "WORKQUEUE_SERVICE_URL",
    "WORKQUEUE_SERVICE_TOKEN",
    "WQ_CONFIG",
    "WORKQUEUE_SERVICE_CONFIG",
    "WQ_DATABASE_URL",
    "DATABASE_URL",
    "KRB5CCNAME",
)


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningDaemon:
    """A daemon subprocess with its fakes and the tokens tests use."""

    proc: subprocess.Popen[bytes]
    url: str
    root: Path
    log_path: Path
    gitlab: FakeGitLab
    openshift: FakeOpenShift
    dialect: str
    database_url: str = ""
    admin: str = ""  # OpenShift token: read, submit, retry on every type
    reader: str = ""  # OpenShift token: read only
    extra: dict[str, Any] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    @property
    def local_token(self) -> str:
        """The daemon's own all-permissions token, from its private token cache."""
        (path,) = (self.root / "cache" / "wq" / "tokens").glob("*.json")
        token: str = json.loads(path.read_text(encoding="utf-8"))["token"]
        return token

    def submit(self, **overrides: Any) -> dict[str, Any]:
        """Submit an MR item over plain HTTP (not through the CLI); the created item."""
        payload: dict[str, Any] = {
            "project": PROJECT,
            "source_branch": f"wq/cli-{uuid.uuid4().hex[:10]}",
            "title": "CLI test",
            "commit_message": "CLI test",
            "file_actions": [{"action": "update", "file_path": "sources", "content": "v2\n"}],
            **overrides,
        }
        with self.api() as http:
            response = http.post("/api/work-items/mr", json=payload)
        assert response.status_code == 201, response.text
        item: dict[str, Any] = response.json()["item"]
        return item

    def api(self, token: str | None = None) -> httpx.Client:
        """A plain HTTP client for setting up and checking state behind the CLI's back."""
        headers = {"Authorization": f"Bearer {token or self.admin}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10.0)


def daemon_config(database_url: str, gitlab: FakeGitLab, openshift: FakeOpenShift) -> str:
    """The daemon's config file content."""
    config = {
        "database_url": database_url,
        "processing": {
            "workers": 2,
            "lease_seconds": 5.0,
            "poll_interval_seconds": 0.2,
            "sweep_interval_seconds": 3600.0,
            "backoff_base_seconds": 0.05,
            "backoff_max_seconds": 0.2,
            "shutdown_grace_seconds": 3.0,
        },
        "pools": {BLOCKED: {"capacity": 0, "alert_capacity": 0}},
        "handled_types": {
            "mr": {
                "gitlab_url": gitlab.url,
                "projects": {"group": {"token_env": GITLAB_TOKEN_ENV}},
            }
        },
        "authorization": {
            "rules": [
                {"groups": ["admins"], "permissions": ["read", "submit", "retry"]},
                {"groups": ["readers"], "permissions": ["read"]},
            ],
            "openshift": {"api_url": openshift.url},
        },
    }
    return yaml.safe_dump(config)


def base_env(root: Path, **extra: str) -> dict[str, str]:
    """The environment of a subprocess: no wq settings, private XDG dirs and HOME."""
    env = {key: value for key, value in os.environ.items() if key not in WQ_VARIABLES}
    env.update(
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
        XDG_CONFIG_HOME=str(root / "config"),
        HOME=str(root / "home"),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextlib.contextmanager
def running_daemon(root: Path, database_url: str, dialect: str) -> Iterator[RunningDaemon]:
    """Start the fakes and a migrated daemon; stop everything afterwards."""
    from wq.engine import schema
    from wq.engine.db import make_engine

    engine = make_engine(database_url, pool_size=1)
    schema.upgrade(engine)
    engine.dispose()
    with FakeGitLab() as gitlab, FakeOpenShift() as openshift:
        gitlab.add_token(GITLAB_TOKEN, projects=["group"])
        gitlab.add_project(
            PROJECT, files={"sources": "v1\n", "old.txt": "old\n", "a.txt": "moved\n"}
        )
        assert isinstance(openshift, FakeOpenShift)
        root.mkdir(parents=True, exist_ok=True)
        config_path = root / "config.yml"
        config_path.write_text(daemon_config(database_url, gitlab, openshift), encoding="utf-8")
        port = free_port()
        log_path = root / "daemon.log"
        env = base_env(root, **{GITLAB_TOKEN_ENV: GITLAB_TOKEN})
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "wq", "daemon", "-c", str(config_path), "--port", str(port)],
                env=env,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        daemon = RunningDaemon(
            proc=proc,
            url=f"http://127.0.0.1:{port}",
            root=root,
            log_path=log_path,
            gitlab=gitlab,
            openshift=openshift,
            dialect=dialect,
            database_url=database_url,
            admin=openshift.add_user("ada", ["admins"]),
            reader=openshift.add_user("rita", ["readers"]),
        )
        try:
            _wait_ready(daemon)
            yield daemon
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def _wait_ready(daemon: RunningDaemon) -> None:
    """Until /healthz answers and the local token file exists; fail early on exit."""
    deadline = time.monotonic() + STARTUP_DEADLINE
    last = "no attempt"
    tokens = daemon.root / "cache" / "wq" / "tokens"
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if daemon.proc.poll() is not None:
                raise AssertionError(f"daemon exited early:\n{daemon.log()}")
            try:
                response = http.get(f"{daemon.url}/healthz")
                if response.status_code == 200 and list(tokens.glob("*.json")):
                    return
                last = f"{response.status_code} {response.text}"
            except httpx.TransportError as err:
                last = repr(err)
            time.sleep(0.05)
    raise AssertionError(f"daemon not ready ({last}):\n{daemon.log()}")


# --------------------------------------------------------------------------- running wq


@dataclass(repr=False)
class Result:
    """One `wq` run: exit code, stdout and stderr kept apart."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def cli_env(cache_home: Path, **values: str | None) -> dict[str, str | None]:
    """CliRunner's env: every wq variable unset unless given, a private token cache."""
    env: dict[str, str | None] = dict.fromkeys(WQ_VARIABLES)
    env["XDG_CACHE_HOME"] = str(cache_home)
    env.update(values)
    return env


def invoke(args: list[str], env: Mapping[str, str | None]) -> Result:
    """Run `wq` in-process with typer's CliRunner."""
    runner = CliRunner()
    result = runner.invoke(app, args, env=dict(env), catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


def run(args: list[str], env: Mapping[str, str], cwd: Path) -> Result:
    """Run `python -m wq` as a real subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "wq", *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)
