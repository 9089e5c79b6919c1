"""What a runtime is built with: the handled types and the local token."""

from __future__ import annotations

from pathlib import Path

import pytest

from wq.daemon.runtime import build_registry, build_runtime, wants_local_token
from wq.engine.config import Config, parse_config
from wq.types import KNOWN_TYPES


def test_a_config_file_without_handled_types_handles_nothing() -> None:
    # The reference service's rule; the daemon warns about it at start.
    assert build_registry(parse_config({}, "wq.yml")).names == []


def test_the_embedded_default_handles_every_known_type() -> None:
    assert sorted(build_registry(Config()).names) == sorted(KNOWN_TYPES)


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
