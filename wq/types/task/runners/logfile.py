"""Reading a run's log file as it grows: from its last lines, then what comes next."""

from __future__ import annotations

import codecs
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

READ_BYTES = 64 * 1024
# How long a follower waits between looks at a file that did not grow.
IDLE_SECONDS = 0.25


def tail_offset(path: Path, lines: int | None) -> int:
    """The byte offset where the last `lines` lines of the file begin (0: all of it).

    A last line without its newline counts as a line; the file is read backwards in
    blocks, so a tail of a huge log costs what the tail holds.
    """
    if lines is None:
        return 0
    try:
        with open(path, "rb") as log:
            end = log.seek(0, os.SEEK_END)
            if lines == 0:
                return end
            position, wanted = end, lines
            # The newline that ends the file closes the last line; it does not start one.
            if end:
                log.seek(end - 1)
                if log.read(1) == b"\n":
                    position -= 1
            while position > 0:
                start = max(0, position - READ_BYTES)
                log.seek(start)
                block = log.read(position - start)
                index = len(block)
                while True:
                    index = block.rfind(b"\n", 0, index)
                    if index < 0:
                        break
                    wanted -= 1
                    if wanted == 0:
                        return start + index + 1
                position = start
            return 0
    except FileNotFoundError:
        return 0


def read_growing(
    path: Path, offset: int, *, follow: bool, ended: Callable[[], bool]
) -> Iterator[str]:
    """The file's text from `offset`; when following, what is appended next until
    `ended()` says the writer is done (read after it said so: nothing is lost).
    Yields `""` while it waits, about once a second."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    waited = 0.0
    while True:
        done = not follow or ended()
        try:
            with open(path, "rb") as log:
                log.seek(offset)
                while chunk := log.read(READ_BYTES):
                    offset += len(chunk)
                    waited = 0.0
                    yield decoder.decode(chunk)
        except FileNotFoundError:
            pass
        if done:
            rest = decoder.decode(b"", final=True)
            if rest:
                yield rest
            return
        time.sleep(IDLE_SECONDS)
        waited += IDLE_SECONDS
        if waited >= 1.0:
            waited = 0.0
            yield ""
