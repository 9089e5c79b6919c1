"""A whole-call time limit for GitLab requests.

requests bounds the connection and each read of the socket, not the call: a GitLab (or
a proxy in front of it) that sends a byte every few seconds holds the calling worker
for as long as it likes, and with a few such calls every worker. A `DeadlineSession`
gives each call, from the request to the last byte of the answer, at most `seconds`:
past them a watchdog thread shuts the call's socket down and the call fails with
`CallTimeout`, a `requests` timeout (transient: the action is retried later). The
processing manager's shutdown counts on this bound (`ItemType.request_timeout_seconds`).

A streamed answer (a job's trace) is bounded until its head has come; its body is read
by the caller, each read bounded by the read timeout.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager, ProxyManager


class CallTimeout(requests.exceptions.Timeout):
    """The call was not over within its time limit."""


class _Call:
    """One call in flight: its deadline and the sockets it used."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self._over = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def attach(self, sock: socket.socket | None) -> None:
        """A socket the call sends or reads on (shut down at once when it expired)."""
        if sock is None:
            return
        with self._lock:
            if not self.expired:
                self._sockets.append(sock)
                return
        _shut(sock)

    def expire(self) -> None:
        """Past the deadline: shut the call's sockets down, unless it is over."""
        with self._lock:
            if self._over:
                return
            self.expired = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)

    def end(self) -> None:
        """The call is over: its sockets (kept alive for the next call) are left alone."""
        with self._lock:
            self._over = True
            self._sockets = []


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also under TLS: the reading thread then sees the
    # connection end, and the TLS object it reads through is left as it is.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One thread for every call of the process, expiring them as their deadlines pass."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, _Call]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, call: _Call) -> None:
        """Expire `call` at its deadline (a call over by then is left alone)."""
        with self._changed:
            heapq.heappush(self._due, (call.deadline, next(self._order), call))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wq-gitlab-deadlines", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._changed.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, call = heapq.heappop(self._due)
            call.expire()


_watchdog = _Watchdog()
_current = threading.local()  # the call this thread is making


def _attach_to_current(sock: socket.socket | None) -> None:
    call: _Call | None = getattr(_current, "call", None)
    if call is not None:
        call.attach(sock)


class _Watched(HTTPConnection):
    """A connection whose socket the calling thread's call may shut down (HTTP and,
    mixed in first, HTTPS)."""

    def connect(self) -> None:
        super().connect()
        _attach_to_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach_to_current(self.sock)  # a kept-alive connection (None before its connect)
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    """The TLS connection likewise."""


class _WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _Watched


class _WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPConnectionPool, "https": _WatchedHTTPSConnectionPool}


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter, its connections (direct or through an HTTP proxy) watched."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        manager: PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if isinstance(manager, ProxyManager):  # not a SOCKS proxy's own classes
            manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


class DeadlineSession(requests.Session):
    """A requests session whose every call is over within `seconds` or fails."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        adapter = _WatchedAdapter()
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send within the deadline (a redirect followed is part of the same call)."""
        if getattr(_current, "call", None) is not None:
            return super().send(request, **kwargs)
        call = _Call(time.monotonic() + self.seconds)
        _current.call = call
        _watchdog.watch(call)
        try:
            response = super().send(request, **kwargs)
        except requests.exceptions.RequestException:
            if call.expired:
                raise CallTimeout(self._late()) from None
            raise
        finally:
            _current.call = None
            call.end()
        if call.expired:  # an answer without a length ends as its socket is shut down
            raise CallTimeout(self._late())
        return response

    def _late(self) -> str:
        return f"no whole answer within {self.seconds:g} s"
