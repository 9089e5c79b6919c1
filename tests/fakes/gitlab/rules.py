"""What GitLab refuses: invalid branch names and repository paths, with GitLab's messages.

Branch names follow ``Gitlab::GitRefValidator.validate`` (git's check-ref-format rules for
``refs/heads/<name>`` plus GitLab's own: no ``refs/heads/`` or ``refs/remotes/`` prefix, not
``HEAD``, no leading ``-``) and the push check that refuses 40-hex names. A lone ``@`` is a
valid branch name for GitLab (``refs/heads/@`` passes check-ref-format), so it is accepted.

Repository paths follow two layers, as in GitLab:

- the Files API validates the ``:file_path`` URL parameter first (``FilePath`` validator:
  no ``.``/``..`` path, no ``..`` segment, ``\\`` counts as a separator, no newline, not
  absolute except for ``/raw``, no leftover percent-escapes) → 400 ``{"error":
  "file_path should be a valid file path"}``;
- every write (Files API and commit actions) then goes through Gitaly's rules: empty →
  "You must provide a file path"; ``//`` → "invalid path: '<path>'"; a path that climbs out
  of the repository → "Path cannot include directory traversal"; created paths whose first
  segment is ``.git`` or that start with ``..`` → "invalid path: '<path>'". Other ``.`` and
  ``..`` segments are folded the way Gitaly cleans paths (``a/./b`` → ``a/b``).
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote_plus

from tests.fakes.gitlab.api import ApiError, message_error

HEX_BRANCH_MESSAGE = "You cannot create a branch with a 40-character hexadecimal branch name."
DF_CONFLICT_MESSAGE = "Branch name conflicts with existing branch hierarchy."

# Gitlab::GitRefValidator::FORBIDDEN_BYTES_REGEX: control characters, DEL, and ` ~^:?*[\`.
_FORBIDDEN_REF_CHARS = re.compile(r"[\x00-\x1f\x7f ~^:?*\[\\]")
_FULL_SHA = re.compile(r"[0-9a-fA-F]{40}")
# Gitlab::PathTraversal::PATH_TRAVERSAL_REGEX_WITH_NEWLINE.
_PATH_TRAVERSAL = re.compile(r"\A\.{1,2}\Z|\A\.\.[/\\]|[/\\]\.\.\Z|[/\\]\.\.[/\\]|\n")
_ROOT = "/repository"


def branch_name_error(name: str) -> str | None:
    """Why GitLab refuses `name` as a new branch (its message), or None when valid."""
    if not name or name.startswith(("refs/heads/", "refs/remotes/")) or name == "HEAD":
        return "Branch name is invalid"
    if (
        name.startswith(("-", "/"))
        or name.endswith(("/", "."))
        or _FORBIDDEN_REF_CHARS.search(name)
        or any(sequence in name for sequence in ("..", "//", "@{"))
        or any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))
    ):
        return "Branch name is invalid"
    if _FULL_SHA.fullmatch(name):
        return HEX_BRANCH_MESSAGE
    return None


def branch_conflicts(branches: dict[str, str], name: str) -> bool:
    """Whether `name` cannot coexist with an existing branch (git's refs are files and
    directories: `a` and `a/b` cannot both exist)."""
    return any(
        other != name and (other.startswith(name + "/") or name.startswith(other + "/"))
        for other in branches
    )


def check_url_file_path(path: str, *, allow_absolute: bool = False) -> None:
    """The Files API's `file_path: true` parameter validator (400 before anything else)."""
    decoded = unquote_plus(path)
    if (
        decoded != unquote_plus(decoded)
        or _PATH_TRAVERSAL.search(decoded)
        or (decoded.startswith("/") and not allow_absolute)
    ):
        raise ApiError(400, {"error": "file_path should be a valid file path"})


def clean_path(path: str) -> str:
    """A repository path as Gitaly accepts it for a write (cleaned), or its 400 error."""
    if path == "":
        raise message_error(400, "You must provide a file path")
    if "//" in path:
        raise message_error(400, f"invalid path: '{path}'")
    cleaned = posixpath.normpath(f"{_ROOT}/{path}")
    if cleaned != _ROOT and not cleaned.startswith(_ROOT + "/"):
        raise message_error(400, "Path cannot include directory traversal")
    return cleaned[len(_ROOT) + 1 :] or "."


def check_creatable_path(path: str) -> None:
    """Gitaly's extra rules for a path a write creates (after `clean_path`)."""
    if path == "." or path.startswith("..") or path.split("/", 1)[0] == ".git":
        raise message_error(400, f"invalid path: '{path}'")


def check_creatable(tree: dict[str, bytes], path: str) -> None:
    """A file can be created at `path`: nothing there, no file where a directory goes."""
    check_creatable_path(path)
    if path in tree:
        raise message_error(400, "A file with this name already exists")
    if any(existing.startswith(path + "/") for existing in tree):
        raise message_error(400, "A directory with this name already exists")
    parts = path.split("/")
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in tree:
            raise message_error(400, "A file with this name already exists")
