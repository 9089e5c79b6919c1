"""A TCP relay on 127.0.0.1 in front of a real service, that can be taken down.

Clients connect to the relay's port; while it is up, bytes go both ways to the target
unchanged. `down()` cuts every open connection and answers new ones by closing them at
once (a client sees a reset, as when a load balancer has no healthy backend); `up()`
relays again. The listening port never changes, so clients keep their endpoint.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType


class Relay:
    """Forwards connections to `target` (host, port) until taken down."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._up = threading.Event()
        self._up.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.refused = 0  # connections closed at once while down
        self._thread = threading.Thread(target=self._accept, name="relay", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The relay's address as an HTTP endpoint."""
        return f"http://127.0.0.1:{self.port}"

    def down(self) -> None:
        """Cut open connections and refuse new ones."""
        self._up.clear()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def up(self) -> None:
        """Relay again."""
        self._up.set()

    def close(self) -> None:
        """Stop listening and cut everything."""
        self._closed.set()
        self.down()
        # Closing alone does not wake a thread blocked in accept() (Linux): the join
        # below then waited its whole timeout. A shutdown does wake it.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up.is_set():
                self.refused += 1
                with contextlib.suppress(OSError):
                    # Linger 0: the close is a reset, not a polite end of stream.
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                # `down` may have come while this one was connecting upstream: it must
                # not outlive it (a pool kept it, and the outage was not one for all).
                if not self._up.is_set():
                    self.refused += 1
                    for sock in (client, upstream):
                        sock.close()
                    continue
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
            with self._lock:
                self._open.discard(source)
            source.close()
