"""A private PostgreSQL cluster for fault tests: started, restarted, stopped and hung at will.

It is made with the installed server's `initdb` and `pg_ctl` in a temporary directory,
listens on a free loopback port (never the shared cluster on 5432) and trusts local
connections. PostgreSQL refuses to run as root, so under root every server command
runs as the `postgres` system user (`runuser`), which owns the directory. `destroy`
always leaves nothing running: it resumes a hung server, stops it immediately, kills
what is left and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path(os.environ.get("WQ_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
SERVER_USER = "postgres"
COMMAND_TIMEOUT = 60.0


def missing_binaries() -> str | None:
    """Why a private cluster cannot be made here, or None."""
    for name in ("initdb", "pg_ctl", "postgres"):
        if not os.access(PG_BIN / name, os.X_OK):
            return f"{PG_BIN / name} is not installed (set WQ_TEST_PG_BIN to the server's bin/)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateCluster:
    """One throwaway cluster; `url(database)` is its SQLAlchemy URL."""

    def __init__(self) -> None:
        self._as_root = os.geteuid() == 0
        # Under root the server user must reach the directory: /tmp is traversable by
        # everyone, a TMPDIR under /root is not.
        parent = os.environ.get("WQ_TEST_PG_TMP", "/tmp") if self._as_root else None
        self.base = Path(tempfile.mkdtemp(prefix="wq-pg-", dir=parent))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.port = free_port()
        if self._as_root:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(self.base, user.pw_uid, user.pw_gid)

    def _run(self, *argv: str) -> None:
        command = [str(PG_BIN / argv[0]), *argv[1:]]
        if self._as_root:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:2])} failed ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}\n{self.server_log()}"
            )

    def server_log(self) -> str:
        """The end of the server's log, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def init(self) -> None:
        """initdb: trust auth, no fsync (a test cluster need not survive a power cut)."""
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.base} "
            "-c fsync=off -c max_connections=60"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (`fast`: sessions are disconnected; `immediate`: no shutdown checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        """Stop (fast) and start again on the same port."""
        self.stop()
        self.start()

    def url(self, database: str = "postgres") -> str:
        """The URL of a database of this cluster."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def postmaster_pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def server_pids(self) -> list[int]:
        """The postmaster and every process it started (backends, background workers)."""
        root = self.postmaster_pid()
        if root is None:
            return []
        pids = [root]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                # Field 4 of stat is the parent pid; the name (field 2) may hold spaces.
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == root:
                    pids.append(int(entry.name))
        return pids

    def _signal(self, signum: int) -> None:
        for pid in self.server_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def freeze(self) -> None:
        """Hang the server: stop the postmaster and its backends; connections stay open."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Let a frozen server run again."""
        self._signal(signal.SIGCONT)

    def destroy(self) -> None:
        """Leave nothing running and nothing on disk, whatever state it is in."""
        self.thaw()
        if self.postmaster_pid() is not None:
            try:
                self.stop("immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                self._signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() for pid in self.server_pids()):
            if time.monotonic() > deadline:
                self._signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        shutil.rmtree(self.base, ignore_errors=True)
