"""File modes in tests: the usual umask, and a path's permission bits."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are world-readable unless made otherwise."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    """The permission bits of `path` (0o600, 0o755 ...)."""
    return stat.S_IMODE(path.stat().st_mode)
