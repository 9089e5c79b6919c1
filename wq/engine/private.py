"""Files and directories only their owner can read: wq's database and task runs.

What wq creates for itself may hold secrets (a run's environment, work items and their
payloads), so it is created 0700 (directories) and 0600 (files) whatever the umask, as
the token cache's files are. What exists already keeps its mode: an operator's choice
(a shared runs directory, a database file made by hand) is not undone. Standard
library only: the run supervisor imports it and must start fast.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import BinaryIO

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private_dirs(path: Path) -> None:
    """Create `path` and its missing parents 0700; directories already there keep their mode.

    Raises `OSError` when one cannot be made (`NotADirectoryError` for a file in the way).
    """
    missing: list[Path] = []
    current = path
    # Each missing level is ours to create (XDG asks 0700 for them too), not only the
    # last one: os.makedirs gives the parents the umask's mode. The walk stops at
    # anything there: a file in the way fails the mkdir below it with ENOTDIR, naming
    # the directory that cannot be created (as `mkdir -p` does).
    while not os.path.lexists(current) and current.parent != current:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            # Made meanwhile by another process (a replica sharing the directory).
    if not missing and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def create_private_file(path: Path) -> bool:
    """Create `path` empty and 0600 unless it exists; True when it was created here."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def open_private_append(path: Path) -> BinaryIO:
    """Open `path` for appending bytes, creating it 0600 if it does not exist."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    return os.fdopen(fd, "ab")


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (readers never see half of it), 0600."""
    # mkstemp creates the file 0600 under a name of its own: concurrent writers do not
    # share a half-written temporary file.
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
