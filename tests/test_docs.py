"""The README and the documentation site stay true: their config examples validate, the
test command is what CI runs, the layout page names every package, links and anchors
point at what exists, the CLI reference is the program's own, the TUI's pictures are its
snapshot tests', and the help names where a config is looked for."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from wq.cli.main import app
from wq.engine.config import CONFIG_ENV_VARS, SYSTEM_CONFIG_PATHS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = sorted(DOCS.rglob("*.md"))
SNAPSHOTS = ROOT / "tests" / "tui" / "__snapshots__" / "test_snapshots"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the ```LANGUAGE blocks of a Markdown text, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def section(text: str, title: str) -> str:
    """A `## TITLE` section of a Markdown text, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no '## {title}' section"
    return match.group(1)


YAML_BLOCKS = [
    (path.name, block)
    for path in [ROOT / "README.md", *PAGES]
    for block in fenced(read(path), "yaml")
    # Kubernetes documents, not wq configs: the deploy tests check those.
    if "apiVersion:" not in block and "kind:" not in block.split("\n", 1)[0]
]


def test_the_configuration_page_has_a_full_config_example() -> None:
    # Its first example: a whole file, database to handled types.
    config = fenced(read(DOCS / "configuration.md"), "yaml")
    assert config and config[0].startswith("database_url:")
    assert "handled_types:" in config[0]


@pytest.mark.parametrize(("page", "block"), YAML_BLOCKS, ids=lambda value: str(value)[:20])
def test_every_config_example_passes_config_check(tmp_path: Path, page: str, block: str) -> None:
    path = tmp_path / "wq.yml"
    path.write_text(block, encoding="utf-8")
    result = CliRunner().invoke(app, ["config", "check", "--no-env", str(path)])
    assert result.exit_code == 0, f"{page}: {result.output}"
    assert "structure ok" in result.output


def test_the_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (command,) = fenced(section(README, "Test it"), "sh")[:1]
    assert 'pip install -e ".[dev]"' in command and command.rstrip().endswith("pytest")
    assert 'pip install --quiet -e ".[dev]"' in ci and re.search(r"^pytest$", ci, re.M)
    # The checks the README says CI adds are the ones it runs, and no others.
    for check in ("ruff format --check", "ruff check", "mypy", "mkdocs build --strict"):
        assert check in section(README, "Test it"), check
        assert re.search(rf"^(NO_MKDOCS_2_WARNING=1 )?{re.escape(check)}", ci, re.M), check


def test_the_layout_page_matches_the_packages() -> None:
    (layout,) = fenced(read(DOCS / "layout.md"), "")[:1]
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


def wq_command_lines(text: str) -> list[str]:
    """Every `wq ...` command a Markdown text shows: a line of a ```sh block (from `wq`
    on, up to a comment, `;`, `&&` or a pipe) or an inline `wq ...` code span."""
    found = []
    for block in fenced(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            match = re.search(r"(?:^|[;&|]\s*|\bdo\s+)(wq\s.*|wq$)", line)
            if match:
                found.append(re.split(r"\s#|;|&&|\|(?!\w)", match.group(1))[0])
    found += re.findall(r"`(wq(?: [^`]*)?)`", text)
    return found


def test_every_wq_command_shown_exists_with_its_options() -> None:
    # A renamed command or option leaves no example behind in the README or the docs.
    root = typer.main.get_command(app)
    problems = []
    for page in [ROOT / "README.md", *PAGES]:
        for shown in wq_command_lines(read(page)):
            words = re.sub(r"'[^']*'|\"[^\"]*\"", "''", shown).replace("[", " ").split()
            command, context = root, root.context_class(root, info_name="wq")
            for word in words[1:]:
                child = getattr(command, "get_command", lambda *_: None)(context, word)
                if word.startswith("-") or child is None:
                    # After a group, a lower-case word names a subcommand (COMMAND and
                    # TYPE are placeholders).
                    if hasattr(command, "commands") and re.fullmatch(r"[a-z][\w-]*", word):
                        problems.append(f"{page.name}: {shown!r}: no command {word}")
                    break
                command = child
                context = command.context_class(command, info_name=word, parent=context)
            names = {name for param in command.params for name in param.opts}
            names |= {"--help"}
            for word in words:
                option = word.split("=")[0].rstrip("]")
                if re.fullmatch(r"--?[a-z][\w-]*", option) and option not in names:
                    problems.append(f"{page.name}: {shown!r}: no {option}")
    assert not problems, "\n".join(problems)


def tui_keys() -> set[str]:
    """The keys and `:` commands the TUI's own `?` help lists: the first word of each
    part of its entries' keys (parts are split by two spaces; `j/k` is two keys)."""
    from wq.tui.help import SECTIONS

    keys = set()
    for _, entries in SECTIONS:
        for shown, _ in entries:
            for cell in re.split(r"\s{2,}", shown.strip()):
                word = cell.split()[0]
                for key in word.split("/") if len(word) > 1 else [word]:
                    if re.fullmatch(r"\S|space|enter|esc|ctrl\+\w|:\w+", key):
                        keys.add(key)
    return keys


def test_the_tui_page_names_every_key() -> None:
    page = read(DOCS / "tui.md")
    spoken = page.lower().replace("ctrl-", "ctrl+")
    keys = tui_keys()
    assert {"o", "p", "u", "i", "r", "c", "space", "enter", ":items", ":q"} <= keys, keys
    missing = [
        key
        for key in sorted(keys)
        if not (
            re.search(rf"`{re.escape(key)}[` ]", page)
            if len(key) == 1 or key.startswith(":")
            else key in spoken
        )
    ]
    assert not missing, f"docs/tui.md does not mention {missing}"


def slug(heading: str) -> str:
    """A heading's anchor (GitHub's and MkDocs' alike here): lower case, punctuation
    dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(text: str) -> set[str]:
    return {slug(title) for title in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *PAGES], ids=lambda path: str(path.relative_to(ROOT))
)
def test_every_link_points_at_what_exists(page: Path) -> None:
    text = read(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        if path.startswith("http"):
            continue
        if path:
            linked = (page.parent / path).resolve()
            assert linked.exists(), f"{page.name}: {target}"
            if linked.suffix != ".md":
                continue
            targets = anchors_of(read(linked))
        else:
            targets = anchors_of(text)
        assert not anchor or anchor in targets, f"{page.name}: {target}"


def test_the_readme_is_the_front_door() -> None:
    # The reference lives in docs/; the README links into it and stays short.
    assert len(README.splitlines()) <= 250
    for page in ("docs/cli.md", "docs/configuration.md", "docs/operations.md", "docs/api.md"):
        assert f"({page}" in README, page


def test_the_cli_reference_is_the_programs_own() -> None:
    check = subprocess.run(
        [sys.executable, str(DOCS / "gen_cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    reference = read(DOCS / "reference" / "cli.md")
    for command in ("wq logs", "wq replicas", "wq submit task", "wq db migrate"):
        assert f"## `{command}`" in reference, command
    assert "| `-f, --follow` |" in reference
    # The root's own options, and usage lines as `--help` prints them.
    assert "## `wq`\n" in reference and "| `--version` |" in reference
    assert "`wq logs [OPTIONS] {item_id}`" in reference


@pytest.mark.parametrize("view", ["overview", "pools", "queue", "items", "item_detail"])
def test_the_tuis_pictures_are_its_snapshots(view: str) -> None:
    snapshot = SNAPSHOTS / f"test_{view}{'' if view == 'overview' else '_view'}[200x50].svg"
    picture = DOCS / "images" / f"{view}.svg"
    assert picture.read_bytes() == snapshot.read_bytes(), (
        f"copy {snapshot.relative_to(ROOT)} to {picture.relative_to(ROOT)}"
    )
