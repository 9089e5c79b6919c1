"""Project names, shared by every type: a path like `group/sub/project`.

Pools match projects by `/`-separated prefix, types hand the name to GitLab or
Kubernetes, and operators read it in tables, logs and metric labels, so a name must be a
clean path: no whitespace, control or invisible formatting character (a direction
override could make it read as another name), no backslash, no empty, `.` or `..`
segment, no segment starting with `-` (a program handed the name would take it for an
option), no leading or trailing `/`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from wq.engine.project_names import UNSEEN, canonical_project, project_problem

# The same rule as `project_problem`, for the OpenAPI document: segments separated by
# single slashes, each without those characters or backslash, none `.` or `..` and
# none starting with `-` (one starting with neither a dot nor `-`, one dot and a
# non-dot, or two dots and more). No look-arounds, so that any JSON Schema regex
# engine reads it.
_CHAR = rf"[^/\\{UNSEEN}]"
_FIRST = rf"[^./\\{UNSEEN}]"
_LEAD = rf"[^-./\\{UNSEEN}]"
SEGMENT_PATTERN = rf"(?:{_LEAD}{_CHAR}*|\.{_FIRST}{_CHAR}*|\.\.{_CHAR}+)"
PROJECT_PATTERN = rf"^{SEGMENT_PATTERN}(?:/{SEGMENT_PATTERN})*$"


def _check_project(path: str) -> str:
    reason = project_problem(path)
    if reason:
        raise ValueError(reason)
    return canonical_project(path)


# The pattern is documented, not matched by pydantic: the validator's reasons read better.
ProjectPath = Annotated[
    str, Field(json_schema_extra={"pattern": PROJECT_PATTERN}), AfterValidator(_check_project)
]
"""A project name that `project_problem` accepts (types add their own length bounds)."""
