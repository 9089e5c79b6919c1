"""The one spelling of a project name, as it is stored and matched."""

from __future__ import annotations

import unicodedata


def canonical_project(project: str) -> str:
    """A project name as it is stored and matched: Unicode NFC.

    Names that read the same (a precomposed `é`, or `e` and a combining accent, as some
    keyboards and file systems give it) are one project: one pool, one queue, one row in
    every table, not two that look alike and share nothing.
    """
    return unicodedata.normalize("NFC", project)
