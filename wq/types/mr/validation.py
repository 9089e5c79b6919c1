"""Checks of what an MR submission names on GitLab: repository paths, branches, labels.

Each check returns a readable reason or None. They refuse what GitLab or git would
refuse later (so the item would fail after it was accepted) and what could make a
client call a different endpoint than meant (`..` in a path that ends up in a URL).

Each rule is also written as JSON Schema for the OpenAPI document (`PATH_SCHEMA`,
`BRANCH_SCHEMA`, `LABEL_SCHEMA`): a `pattern` for the characters and the shape, and a
`not` pattern for the substrings a value must not hold, because a single pattern would
need look-arounds, which neither pydantic-core's regex engine nor most JSON Schema
tools read. The schema accepts exactly what the check accepts (a test compares them);
the checks stay, for their readable reasons.
"""

from __future__ import annotations

import re
from typing import Any

MAX_PATH_LENGTH = 4096  # PATH_MAX: no checkout could hold a longer path
MAX_REF_LENGTH = 255  # mr_details.source_branch / target_branch
MAX_LABEL_LENGTH = 255  # GitLab's limit on a label title

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# git check-ref-format: no space, no control character and none of ~ ^ : ? * [ \
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
# A `.git` segment, also as Windows and macOS checkouts would read it
# (`.GIT`, `.git.`, `.git ` and the 8.3 short name `git~1`).
_GIT_DIRS = frozenset({".git", "git~1"})

# The same rules for the document. JSON Schema patterns are ECMA 262 searches, so each
# is anchored; `$` is the end of the value there (no trailing newline allowed through).
_PATH_CHAR = r"[^/\\\x00-\x1f\x7f]"
PATH_SCHEMA: dict[str, Any] = {
    "pattern": rf"^{_PATH_CHAR}+(?:/{_PATH_CHAR}+)*$",
    # a `.` or `..` segment, or one that reads as `.git` (any case, trailing dots or spaces)
    "not": {"pattern": r"(?:^|/)(?:\.\.?|(?:\.[gG][iI][tT]|[gG][iI][tT]~1)[. ]*)(?:/|$)"},
}
_REF_CHAR = r"[^\x00-\x20\x7f~^:?*\[\\]"
_REF_EDGE = r"[^-./\x00-\x20\x7f~^:?*\[\\]"  # what a name may start with
_REF_LAST = r"[^./\x00-\x20\x7f~^:?*\[\\]"  # and end with
BRANCH_SCHEMA: dict[str, Any] = {
    "pattern": rf"^{_REF_EDGE}(?:{_REF_CHAR}*{_REF_LAST})?$",
    # .., @{, //, a part starting with . or ending in .lock, a full ref, HEAD or @
    "not": {"pattern": r"\.\.|@\{|//|/\.|\.lock(?:/|$)|^refs/|^(?:HEAD|@)$"},
}
# Python's `str.strip` whitespace that is not already a control character.
_BLANK = r"\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_LABEL_CHAR = r"[^,\x00-\x1f\x7f]"
LABEL_SCHEMA: dict[str, Any] = {
    "pattern": rf"^{_LABEL_CHAR}*[^,\x00-\x1f\x7f{_BLANK}]{_LABEL_CHAR}*$",
}


def path_problem(path: str) -> str | None:
    """Why `path` is not a normalised path relative to the repository root, or None."""
    if not path:
        return "must not be empty"
    if len(path) > MAX_PATH_LENGTH:
        return f"is longer than {MAX_PATH_LENGTH} characters"
    if _CONTROL.search(path):
        return "must not contain control characters"
    if "\\" in path:
        return "must not contain a backslash; separate directories with /"
    if path.startswith("/"):
        return "must be relative to the repository root (no leading /)"
    for segment in path.split("/"):
        if segment == "":
            return "must not contain empty segments (// or a trailing /)"
        if segment in (".", ".."):
            return f"must not contain a '{segment}' segment"
        if segment.rstrip(". ").lower() in _GIT_DIRS:
            return "must not name the .git directory"
    return None


def branch_problem(name: str) -> str | None:
    """Why `name` is not a branch name git and GitLab accept, or None.

    git's check-ref-format rules for a branch, plus GitLab's: not `HEAD` and not a
    full ref (`refs/...`), which GitLab would read as another ref than a branch.
    """
    if not name:
        return "must not be empty"
    if len(name) > MAX_REF_LENGTH:
        return f"is longer than {MAX_REF_LENGTH} characters"
    bad = _REF_FORBIDDEN.search(name)
    if bad:
        shown = repr(bad.group()) if bad.group().isprintable() else "a control character"
        return f"must not contain spaces, control characters or any of ~^:?*[\\ (found {shown})"
    if name.startswith("refs/"):
        return "must be a branch name, not a full ref (no refs/ prefix)"
    if name == "HEAD" or name == "@":
        return f"must not be {name!r}"
    if name.startswith("-"):
        return "must not start with -"
    if name.startswith("/") or name.endswith("/") or "//" in name:
        return "must not start or end with / or contain //"
    if ".." in name:
        return "must not contain .."
    if "@{" in name:
        return "must not contain @{"
    if name.endswith("."):
        return "must not end with ."
    for component in name.split("/"):
        if component.startswith("."):
            return "no /-separated part may start with ."
        if component.endswith(".lock"):
            return "no /-separated part may end with .lock"
    return None


def label_problem(label: str) -> str | None:
    """Why GitLab could not take `label` as one label, or None."""
    if not label.strip():
        return "must not be blank"
    if len(label) > MAX_LABEL_LENGTH:
        return f"is longer than {MAX_LABEL_LENGTH} characters"
    if "," in label:
        return "must not contain a comma (GitLab separates labels with commas)"
    if _CONTROL.search(label):
        return "must not contain control characters"
    return None
