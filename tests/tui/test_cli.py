"""`wq tui` is a registered command with its options."""

from __future__ import annotations

from typer.testing import CliRunner

from wq.cli.main import app


def test_tui_command_has_its_options() -> None:
    result = CliRunner().invoke(app, ["tui", "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.stdout
    for option in ("--url", "--refresh", "--readonly"):
        assert option in result.stdout


def test_tui_refuses_a_too_short_refresh() -> None:
    result = CliRunner().invoke(app, ["tui", "--refresh", "0"], catch_exceptions=False)
    assert result.exit_code == 2
