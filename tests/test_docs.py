"""The README stays true: its config examples validate, its test command is what CI
runs, its Layout names every package, and the help names where a config is looked for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wq.cli.main import app
from wq.engine.config import CONFIG_ENV_VARS, SYSTEM_CONFIG_PATHS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the ```LANGUAGE blocks of a Markdown text, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def section(text: str, title: str) -> str:
    """A `## TITLE` section of a Markdown text, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


YAML_BLOCKS = fenced(README, "yaml")


def test_the_readme_has_a_full_config_example() -> None:
    # The Configuration section's example: a whole file, database to handled types.
    config = fenced(section(README, "Configuration"), "yaml")
    assert config and config[0].startswith("database_url:")
    assert "handled_types:" in config[0]


@pytest.mark.parametrize("block", range(len(YAML_BLOCKS)))
def test_every_readme_config_example_passes_config_check(tmp_path: Path, block: int) -> None:
    path = tmp_path / "wq.yml"
    path.write_text(YAML_BLOCKS[block], encoding="utf-8")
    result = CliRunner().invoke(app, ["config", "check", "--no-env", str(path)])
    assert result.exit_code == 0, f"README yaml block {block}: {result.output}"
    assert "structure ok" in result.output


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (command,) = fenced(section(README, "Test it"), "sh")[:1]
    assert 'pip install -e ".[dev]"' in command and command.rstrip().endswith("pytest")
    assert 'pip install --quiet -e ".[dev]"' in ci and re.search(r"^pytest$", ci, re.M)
    # The checks the README says CI adds are the ones it runs, and no others.
    for check in ("ruff format --check", "ruff check", "mypy"):
        assert check in section(README, "Test it"), check
        assert re.search(rf"^{re.escape(check)}", ci, re.M), check


def test_the_readme_layout_matches_the_packages() -> None:
    (layout,) = fenced(section(README, "Layout"), "")[:1]
    listed = {line.split()[0].rstrip("/") for line in layout.splitlines() if line.strip()}
    packages = {
        str(init.parent.relative_to(ROOT)) for init in (ROOT / "wq").glob("*/**/__init__.py")
    }
    assert "wq/engine" in packages
    assert packages <= listed, sorted(packages - listed)
    missing = sorted(path for path in listed if not (ROOT / path).exists())
    assert not missing, missing


def test_the_daemon_help_names_every_place_a_config_is_looked_for() -> None:
    result = CliRunner().invoke(app, ["daemon", "--help"], env={"COLUMNS": "400"})
    text = " ".join(result.output.split())
    for variable in CONFIG_ENV_VARS:
        assert f"${variable}" in text
    for path in SYSTEM_CONFIG_PATHS:
        assert str(path) in text


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readmes_links_point_at_what_exists() -> None:
    anchors = {slug(title) for title in re.findall(r"^#+ (.+)$", README, re.M)}
    for target in re.findall(r"\]\(([^)]+)\)", README):
        path, _, anchor = target.partition("#")
        if path.startswith("http"):
            continue
        if path:
            assert (ROOT / path).exists(), target
            text = (ROOT / path).read_text(encoding="utf-8")
            targets = {slug(title) for title in re.findall(r"^#+ (.+)$", text, re.M)}
        else:
            targets = anchors
        assert not anchor or anchor in targets, target
