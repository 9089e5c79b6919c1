"""Readings taken around a run: CPU of the machine and of PostgreSQL, versions, profiles.

Also `checkpoint`, which flushes PostgreSQL's dirty buffers between two phases.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import pstats
import threading

import psycopg
from databases import libpq_url


def checkpoint(url: str) -> None:
    """Flush dirty buffers so one phase's writes do not land in the next one's timing."""
    with contextlib.suppress(psycopg.Error), psycopg.connect(libpq_url(url)) as conn:
        conn.autocommit = True
        conn.execute("CHECKPOINT")


def wq_source() -> str:
    """Which wq was measured: the git commit of the imported package, and if it was dirty."""
    import subprocess

    import wq

    root = os.path.dirname(os.path.dirname(os.path.abspath(wq.__file__)))
    try:
        commit = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "wq"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{root} (not a git checkout)"
    return f"{root} @ {commit}" + (" + uncommitted changes in wq/" if dirty else "")


def machine_cpu() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [float(value) for value in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    total = sum(fields[:8])
    return (total - idle) / tick, total / tick


def database_cpu(database: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving `database` (Linux, same host).

    Backends show the database in their process title.
    """
    found: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                title = cmdline.read().decode(errors="replace").split()
            # "postgres: [CLUSTER:] USER DB HOST STATE"
            if not title or title[0] != "postgres:" or database not in title[1:4]:
                continue
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(entry)] = (float(fields[11]) + float(fields[12])) / tick
    return found


def server_version(url: str) -> str:
    """PostgreSQL's version, or `none: SQLite ...` for a SQLite URL."""
    if url.startswith("sqlite"):
        import sqlite3

        return f"none: SQLite {sqlite3.sqlite_version}"
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


class ThreadProfiler:
    """cProfile for every thread started while installed (cProfile alone sees one thread).

    The manager's scheduler, heartbeat, sweep and pool workers are plain threads, so
    `Thread.run` is wrapped to profile each one; the stats are merged into one file
    that `python -m pstats` or snakeviz can read.
    """

    def __init__(self) -> None:
        self._profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()
        self._original = threading.Thread.run
        self._main = cProfile.Profile()

    def start(self) -> None:
        """Profile this thread and every thread started from now on."""
        original, profiles, lock = self._original, self._profiles, self._lock

        def run(thread: threading.Thread) -> None:
            profile = cProfile.Profile()
            with lock:
                profiles.append(profile)
            profile.enable()
            try:
                original(thread)
            finally:
                profile.disable()

        threading.Thread.run = run  # type: ignore[method-assign]
        self._main.enable()

    def stop(self, path: str) -> None:
        """Stop profiling and write the merged stats of all threads to `path`."""
        self._main.disable()
        threading.Thread.run = self._original  # type: ignore[method-assign]
        stats = pstats.Stats(self._main)
        with self._lock:
            for profile in self._profiles:
                with contextlib.suppress(TypeError):  # a profile that saw no call
                    stats.add(profile)
        stats.dump_stats(path)
