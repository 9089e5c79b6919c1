"""Project names, shared by every type: a path like `group/sub/project`.

Pools match projects by `/`-separated prefix, types hand the name to GitLab or
Kubernetes, and operators read it in tables, logs and metric labels, so a name must be a
clean path: no whitespace, control or invisible formatting character (a direction
override could make it read as another name), no backslash, no empty, `.` or `..`
segment, no leading or trailing `/`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from wq.engine.project_names import canonical_project

# C0 and C1 controls, DEL, the space separators, every format character (Unicode's
# category Cf: soft hyphen, zero-width, bidirectional marks, embeddings, overrides and
# isolates, BOM, tags...) and the other characters Unicode says are ignored when shown
# (Default_Ignorable_Code_Point: the Hangul fillers, variation selectors...), and the
# replacement character (what bytes that are not UTF-8 in a URL's path decode to). As of
# Unicode 14 (Python 3.11's); the ones beyond the BMP are written as themselves, so
# that the documented pattern has no escape a JSON Schema regex engine lacks.
_UNSEEN = (
    r"\x00-\x20\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    r"\u115f-\u1160\u1680\u17b4-\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f"
    r"\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffd"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_UNSEEN_CHAR = re.compile(f"[{_UNSEEN}]")

# The same rule as `project_problem`, for the OpenAPI document: segments separated by
# single slashes, each without those characters or backslash, and none `.` or `..`
# (one not starting with a dot, one dot and a non-dot, or two dots and more). No
# look-arounds, so that any JSON Schema regex engine reads it.
_CHAR = rf"[^/\\{_UNSEEN}]"
_FIRST = rf"[^./\\{_UNSEEN}]"
SEGMENT_PATTERN = rf"(?:{_FIRST}{_CHAR}*|\.{_FIRST}{_CHAR}*|\.\.{_CHAR}+)"
PROJECT_PATTERN = rf"^{SEGMENT_PATTERN}(?:/{SEGMENT_PATTERN})*$"


def project_problem(path: str) -> str | None:
    """Why `path` is not a project path (`group/sub/project`), or None."""
    if not path:
        return "must not be empty"
    if _UNSEEN_CHAR.search(path):
        return (
            "must not contain whitespace, control or invisible formatting characters,"
            " nor bytes that are not UTF-8"
        )
    if "\\" in path or path.startswith("/") or path.endswith("/"):
        return "must be a path like group/project (no backslash, no leading or trailing /)"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return "must not contain empty, '.' or '..' segments"
    return None


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
