"""Project names: what one may be (`project_problem`) and the one spelling of it, as
it is stored and matched (`canonical_project`)."""

from __future__ import annotations

import re
import unicodedata


def canonical_project(project: str) -> str:
    """A project name as it is stored and matched: Unicode NFC.

    Names that read the same (a precomposed `é`, or `e` and a combining accent, as some
    keyboards and file systems give it) are one project: one pool, one queue, one row in
    every table, not two that look alike and share nothing.
    """
    return unicodedata.normalize("NFC", project)


# C0 and C1 controls, DEL, the space separators, every format character (Unicode's
# category Cf: soft hyphen, zero-width, bidirectional marks, embeddings, overrides and
# isolates, BOM, tags...) and the other characters Unicode says are ignored when shown
# (Default_Ignorable_Code_Point: the Hangul fillers, variation selectors...), and the
# replacement character (what bytes that are not UTF-8 in a URL's path decode to). As of
# Unicode 14 (Python 3.11's); the ones beyond the BMP are written as themselves, so
# that the documented pattern has no escape a JSON Schema regex engine lacks.
UNSEEN = (
    r"\x00-\x20\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    r"\u115f-\u1160\u1680\u17b4-\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f"
    r"\u205f-\u206f\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\ufffd"
    "\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_UNSEEN_CHAR = re.compile(f"[{UNSEEN}]")


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
    segments = path.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return "must not contain empty, '.' or '..' segments"
    if any(segment.startswith("-") for segment in segments):
        # As GitLab's paths: a program handed the name (a task kind's `{repository}`)
        # would read `-rf` or `group/--help` as an option.
        return "must not have a segment that starts with '-'"
    return None
