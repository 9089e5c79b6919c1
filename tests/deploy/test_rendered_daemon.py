"""The rendered manifests run: the migration Job's command migrates a PostgreSQL database,
then `wq daemon` with the Deployment's arguments, config and environment (dummy values
for its Secrets) becomes ready on it, logs JSON lines, and serves /api/ to no one
without a token. Run for the base and for the example overlay."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import throwaway_pg_database
from tests.daemon.test_daemon_process import (
    HTTP_TIMEOUT,
    STARTUP_DEADLINE,
    Daemon,
    clean_env,
    daemons,
    run_wq,
    start_daemon,
    token_files,
)
from tests.deploy.manifests import BASE, EXAMPLE, Obj, config, config_text, container, render
from tests.deploy.manifests import migrate_container as migration

__all__ = ["daemons"]  # the fixture, used below

IMAGE_CONFIG = "/etc/workqueue/config.yml"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database (the shared one of a cluster)."""
    with throwaway_pg_database("wq_deploy") as url:
        yield url


def _environment(entries: list[Obj], root: Path, database_url: str) -> dict[str, str]:
    """A container's environment: its values as written, its Secrets as dummies."""
    env = clean_env(root)
    for entry in entries:
        env[entry["name"]] = entry.get("value", "dummy-" + entry["name"].lower())
    env["WQ_DATABASE_URL"] = database_url
    return env


def _in_test(argv: list[str], config_path: Path) -> list[str]:
    """The container's argv with the image's config path replaced by the test's file."""
    assert IMAGE_CONFIG in argv
    return [str(config_path) if arg == IMAGE_CONFIG else arg for arg in argv]


def _records(daemon: Daemon) -> list[Obj]:
    """The daemon's log records so far (JSON lines; a partial last line is left out)."""
    lines = daemon.log().splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.startswith("{") and line.endswith("\n")]


def _listening_on(daemon: Daemon) -> str:
    """The address the daemon says it listens on, once it says so."""
    deadline = time.monotonic() + STARTUP_DEADLINE
    while time.monotonic() < deadline:
        for record in _records(daemon):
            if record["message"].startswith("listening on "):
                return str(record["message"].removeprefix("listening on "))
        if daemon.proc.poll() is not None:
            pytest.fail(f"daemon exited with {daemon.proc.returncode}:\n{daemon.log()}")
        time.sleep(0.05)
    pytest.fail(f"daemon not listening within {STARTUP_DEADLINE}s:\n{daemon.log()}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("directory", [BASE, EXAMPLE], ids=["base", "example-overlay"])
def test_the_job_migrates_and_the_deployment_serves(
    directory: Path, tmp_path: Path, pg_url: str, daemons: list[Daemon]
) -> None:
    objects = render(directory)
    config_path = tmp_path / "config.yml"
    config_path.write_text(config_text(objects))

    job = migration(objects)
    job_env = _environment(job["env"], tmp_path, pg_url)
    command = _in_test(job["command"], config_path)
    assert command[0] == "wq"
    migrated = run_wq(*command[1:], env=job_env, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    assert "migrated from empty to" in migrated.stdout

    wq = container(objects, "wq")
    env = _environment(wq["env"], tmp_path, pg_url)
    # What Kubernetes sets in every pod: the API server (never reached here, as no
    # request brings a token), which the group and `k8s` issuer rules need at start.
    env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT="9")
    # Loopback instead of the pod's 0.0.0.0, on a free port instead of 8080.
    daemon = start_daemon(
        daemons, tmp_path, env, *_in_test(wq["args"], config_path), "--host", "127.0.0.1"
    )
    # The log is JSON lines: the address is read from there, not by the text pattern.
    daemon._url = _listening_on(daemon)
    assert daemon.wait_healthy() == {"status": "ok", "database": "postgresql"}

    with httpx.Client(base_url=daemon.url, timeout=HTTP_TIMEOUT) as client:
        assert client.get(wq["livenessProbe"]["httpGet"]["path"]).status_code == 200
        assert client.get(wq["readinessProbe"]["httpGet"]["path"]).status_code == 200
        assert client.get("/api/work-items").status_code == 401
    # `auth.local_token: false`: no all-permissions token anywhere.
    assert token_files(tmp_path) == []

    # JSON lines, as the log collector expects; the config's types are served.
    messages = {r["message"] for r in _records(daemon)}
    types = ", ".join(sorted(config(objects)["handled_types"]))
    assert f"handled types: {types}" in messages, messages

    grace = config(objects)["processing"]["shutdown_grace_seconds"]
    assert daemon.terminate(signal.SIGTERM, timeout=grace + 10) == 0, daemon.log()
