"""Which process-ID space this process lives in: the machine's boot and its PID namespace.

A run directory records the space of the replica that started it. Process ids mean
something only inside that space: a replica on another machine (or in another
container) that shares the `runs_dir` must neither signal those ids nor judge by them
whether the run lives.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path


@functools.cache
def current() -> str:
    """This process's PID space, as `<boot id>/<PID namespace>` (stable for its life)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = os.uname().nodename
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "pid:[?]"
    return f"{boot}/{namespace}"
