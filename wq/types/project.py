"""Project names, shared by every type: a path like `group/sub/project`.

Pools match projects by `/`-separated prefix, and types hand the name to GitLab or
Kubernetes, so a name must be a clean path: no control characters, no backslash, no
empty, `.` or `..` segment, no leading or trailing `/`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# The same rule as `project_problem`, for the OpenAPI document: segments separated by
# single slashes, each without control characters or backslash, and none `.` or `..`
# (one not starting with a dot, one dot and a non-dot, or two dots and more). No
# look-arounds, so that any JSON Schema regex engine reads it.
_CHAR = r"[^/\\\x00-\x1f\x7f]"
_FIRST = r"[^./\\\x00-\x1f\x7f]"
SEGMENT_PATTERN = rf"(?:{_FIRST}{_CHAR}*|\.{_FIRST}{_CHAR}*|\.\.{_CHAR}+)"
PROJECT_PATTERN = rf"^{SEGMENT_PATTERN}(?:/{SEGMENT_PATTERN})*$"


def project_problem(path: str) -> str | None:
    """Why `path` is not a project path (`group/sub/project`), or None."""
    if not path:
        return "must not be empty"
    if _CONTROL.search(path):
        return "must not contain control characters"
    if "\\" in path or path.startswith("/") or path.endswith("/"):
        return "must be a path like group/project (no backslash, no leading or trailing /)"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "must not contain empty, '.' or '..' segments"
    return None


def _check_project(path: str) -> str:
    reason = project_problem(path)
    if reason:
        raise ValueError(reason)
    return path


# The pattern is documented, not matched by pydantic: the validator's reasons read better.
ProjectPath = Annotated[
    str, Field(json_schema_extra={"pattern": PROJECT_PATTERN}), AfterValidator(_check_project)
]
"""A project name that `project_problem` accepts (types add their own length bounds)."""
