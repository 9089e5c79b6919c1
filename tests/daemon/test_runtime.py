"""What a runtime is built with: the handled types and the local token."""

from __future__ import annotations

from pathlib import Path

import pytest

from wq.daemon.runtime import (
    build_registry,
    build_runtime,
    unhandled_by_default,
    wants_local_token,
)
from wq.engine.config import Config, parse_config
from wq.types import KNOWN_TYPES
from wq.types.mr import NEEDS_CONFIG


def test_a_config_file_without_handled_types_handles_nothing() -> None:
    # The reference service's rule; the daemon warns about it at start.
    assert build_registry(parse_config({}, "wq.yml")).names == []


def test_the_embedded_default_handles_only_the_types_it_can_take_submissions_for() -> None:
    # mr without GitLab projects would refuse every submission: it is left out, and why.
    assert build_registry(Config()).names == ["task"]
    assert unhandled_by_default(Config()) == {"mr": NEEDS_CONFIG}
    assert set(KNOWN_TYPES) == {"mr", "task"}


def test_a_config_file_naming_mr_handles_it() -> None:
    config = parse_config({"handled_types": {"mr": {}, "task": {}}}, "wq.yml")
    assert sorted(build_registry(config).names) == ["mr", "task"]
    assert unhandled_by_default(config) == {}


@pytest.mark.parametrize(
    ("setting", "loopback", "expected"),
    [
        (None, True, True),
        (None, False, False),
        (True, False, True),
        (False, True, False),
    ],
)
def test_local_token_is_decided_when_the_runtime_is_built(
    tmp_path: Path, setting: bool | None, loopback: bool, expected: bool
) -> None:
    config = parse_config(
        {"database_url": f"sqlite:///{tmp_path / 'wq.db'}", "auth": {"local_token": setting}},
        "wq.yml",
    )
    assert wants_local_token(config, loopback=loopback) is expected
    runtime = build_runtime(config, loopback=loopback)
    try:
        assert (runtime.local_tier is not None) is expected
        assert ("local" in runtime.authenticator.tier_names) is expected
    finally:
        runtime.engine.dispose()


def test_the_environments_events_queue_wins_over_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/configuration.md's precedence: environment over the config file, as for the database URL.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("WORKQUEUE_SERVICE_EVENTS_QUEUE_URL", raising=False)
    from_file = "https://sqs.eu-west-1.amazonaws.com/123456789012/from-file"
    from_env = "https://sqs.eu-west-1.amazonaws.com/123456789012/from-env"
    config = parse_config(
        {"database_url": f"sqlite:///{tmp_path / 'wq.db'}", "events": {"queue_url": from_file}},
        "wq.yml",
    )
    runtime = build_runtime(config, loopback=True)
    try:
        monkeypatch.delenv("WQ_EVENTS_QUEUE_URL", raising=False)
        consumer = runtime.prepare_consumer()
        assert consumer is not None and consumer.queue_url == from_file
        monkeypatch.setenv("WQ_EVENTS_QUEUE_URL", from_env)
        consumer = runtime.prepare_consumer()
        assert consumer is not None and consumer.queue_url == from_env
    finally:
        runtime.engine.dispose()
