"""What GitLab refuses: invalid branch names and repository paths."""

from __future__ import annotations

from tests.fakes.gitlab.api import _message


def _valid_branch_name(name: str) -> bool:
    return not (
        not name
        or name.startswith(("-", "/"))
        or name.endswith(("/", ".lock", "."))
        or ".." in name
        or "//" in name
        or "@{" in name
        or any(char in name for char in " ~^:?*[\\\x7f")
        or any(ord(char) < 32 for char in name)
    )


def _check_path(path: str) -> None:
    if path.startswith("/") or any(part in ("..", ".") for part in path.split("/")):
        raise _message(400, "Path cannot include directory traversal")
    if not path.strip("/"):
        raise _message(400, "You must provide a file path")


def _check_creatable(tree: dict[str, bytes], path: str) -> None:
    if path in tree:
        raise _message(400, "A file with this name already exists")
    if any(existing.startswith(path + "/") for existing in tree):
        raise _message(400, "A directory with this name already exists")
    parts = path.split("/")
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in tree:
            raise _message(400, "A file with this name already exists")
