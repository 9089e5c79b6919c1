"""The per-server Bearer token cache under `$XDG_CACHE_HOME/wq/tokens/`.

One JSON file per server URL, mode 0600 in a 0700 directory, written atomically; a
directory others can write, or another user's, is not trusted (`unsafe`).
Entries carry an expiry (20 h for logins); the embedded daemon's local token has
none and is removed when that daemon stops.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LOGIN_TTL_SECONDS = 20 * 3600


def cache_dir() -> Path:
    """The token cache directory."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wq" / "tokens"


def normalize_server(url: str) -> str:
    """One spelling per server: no trailing slash, lower-case scheme and host."""
    url = url.strip().rstrip("/")
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]+)(.*)$", url)
    if not match:
        return url
    scheme, host, rest = match.groups()
    return f"{scheme.lower()}://{host.lower()}{rest}"


_LOOPBACK_NAMES = {"localhost": "127.0.0.1", "127.0.0.1": "localhost"}


def loopback_alias(url: str) -> str | None:
    """The same loopback server spelled the other way (`localhost` <-> `127.0.0.1`), or
    None for any other server."""
    match = re.match(r"^([a-z][a-z0-9+.-]*)://([^/:]+)(.*)$", normalize_server(url))
    if not match or match.group(2) not in _LOOPBACK_NAMES:
        return None
    scheme, host, rest = match.groups()
    return f"{scheme}://{_LOOPBACK_NAMES[host]}{rest}"


def _other_owner(status: os.stat_result) -> str | None:
    """`uid N` when a file belongs to another user than the one running wq, else None."""
    getuid = getattr(os, "getuid", None)  # not on Windows, which has no such owners
    if getuid is None or status.st_uid == getuid():
        return None
    return f"uid {status.st_uid}"


@dataclass(frozen=True)
class CachedToken:
    """A cached credential for one server."""

    server: str
    token: str
    expires_at: float | None

    @property
    def local(self) -> bool:
        """The embedded daemon's own token (no expiry), not a login's."""
        return self.expires_at is None

    def valid(self, now: float | None = None) -> bool:
        """True until the expiry (forever when it has none)."""
        return self.expires_at is None or (now or time.time()) < self.expires_at


class TokenCache:
    """Read and write cached tokens, one file per server."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or cache_dir()

    def path_for(self, server: str) -> Path:
        """The cache file of one server."""
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", normalize_server(server))
        return self.directory / f"{name}.json"

    def prepare(self) -> None:
        """Make the directory (0700) if it is missing, or make ours 0700 again;
        `OSError` if it cannot be, or belongs to another user."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner = _other_owner(self.directory.stat())
        if owner is not None:
            raise PermissionError(errno.EPERM, f"{self.directory} belongs to {owner}")
        os.chmod(self.directory, 0o700)

    def unsafe(self) -> tuple[str, str] | None:
        """Why no token in the directory can be trusted, and what to do; None when it
        can. It belongs to another user, or others may write it (and so replace or
        remove a token file in it), as ssh refuses such a `~/.ssh`."""
        try:
            status = self.directory.stat()
        except FileNotFoundError:
            return None
        except OSError as err:
            return (
                f"the token cache {self.directory} cannot be read: {err.strerror or err}",
                "set XDG_CACHE_HOME to a directory of your own",
            )
        owner = _other_owner(status)
        if owner is not None:
            return (
                f"the token cache {self.directory} belongs to {owner}, not to you",
                "set XDG_CACHE_HOME to a directory of your own",
            )
        mode = status.st_mode & 0o777
        if mode & 0o022:
            return (
                f"the token cache {self.directory} can be written by others (mode {mode:04o})",
                f"chmod 700 {self.directory}",
            )
        return None

    def load(self, server: str) -> CachedToken | None:
        """The valid cached token of a server, or None (none, expired, or unusable:
        `problem` says why, or `unsafe` of the whole directory)."""
        if self.unsafe() is not None:
            return None
        try:
            entry = self._read(self.path_for(server))
        except (OSError, ValueError):
            return None
        # Servers whose URLs differ only in punctuation share a file name: a token is
        # only ever sent to the server it was written for.
        if entry.server != normalize_server(server):
            return None
        return entry if entry.valid() else None

    def problem(self, server: str) -> str | None:
        """Why a server's cache file that exists cannot be used (None: it can, or there
        is none): unreadable, or not what wq writes (edited by hand, or truncated)."""
        path = self.path_for(server)
        try:
            self._read(path)
        except FileNotFoundError:
            return None
        except OSError as err:
            return f"cannot be read: {err.strerror or err}"
        except ValueError as err:
            return str(err)
        return None

    @staticmethod
    def _read(path: Path) -> CachedToken:
        """The entry of a cache file; ValueError saying what is wrong with it."""
        with path.open("rb") as file:
            mode = os.fstat(file.fileno()).st_mode & 0o777
            raw = file.read()
        if mode & 0o077:
            # As ssh does with a key: a token others could read may have been read.
            raise ValueError(f"can be read by others (mode {mode:04o}): chmod 600 it, or delete it")
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("is not UTF-8 text") from None
        except json.JSONDecodeError:
            raise ValueError("is not JSON") from None
        if not isinstance(data, dict):
            raise ValueError("is not a JSON object")
        token, expires_at = data.get("token"), data.get("expires_at")
        if not isinstance(data.get("server"), str) or not isinstance(token, str) or not token:
            raise ValueError("has no server and token")
        if expires_at is not None and (
            isinstance(expires_at, bool) or not isinstance(expires_at, int | float)
        ):
            raise ValueError("has an expiry that is not a time")
        return CachedToken(data["server"], token, None if expires_at is None else float(expires_at))

    def store(
        self, server: str, token: str, *, ttl_seconds: float | None = LOGIN_TTL_SECONDS
    ) -> Path:
        """Write a token for a server (0600, atomically); return the file."""
        self.prepare()
        path = self.path_for(server)
        expires_at = None if ttl_seconds is None else time.time() + ttl_seconds
        body = json.dumps(
            {"server": normalize_server(server), "token": token, "expires_at": expires_at}
        )
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".json")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(body)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path

    def forget(self, server: str, *, token: str | None = None) -> None:
        """Remove a server's entry (only if it still holds `token`, when given)."""
        path = self.path_for(server)
        if token is not None:
            entry = self.load(server)
            if entry is None or entry.token != token:
                return
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
