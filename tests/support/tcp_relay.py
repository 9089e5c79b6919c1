"""A TCP relay on a loopback port that can lose its connections without a word.

A server that ends a connection says so (its message and the end of the stream reach
the client at once); a proxy or a NAT table that restarts does not: the client's
socket looks sound until it sends, and then is reset. `sever()` does that to every
connection the relay carries: it closes the server side, and answers the client's
next bytes with a reset (nothing is read or sent to the client before them).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket
    severed: threading.Event = field(default_factory=threading.Event)


class TcpRelay:
    """Relays 127.0.0.1:`port` to `target`; `sever()` loses every open connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="tcp-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self._target)
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._client_to_server, args=(pair,), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(pair,), daemon=True).start()

    def _client_to_server(self, pair: _Pair) -> None:
        with contextlib.suppress(OSError):
            while data := pair.client.recv(65536):
                if pair.severed.is_set():
                    break
                pair.server.sendall(data)
        if pair.severed.is_set():
            # A reset, not an orderly close: as a peer that forgot the connection answers.
            pair.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        pair.client.close()
        pair.server.close()

    def _server_to_client(self, pair: _Pair) -> None:
        with contextlib.suppress(OSError):
            while data := pair.server.recv(65536):
                pair.client.sendall(data)
        if not pair.severed.is_set():
            with contextlib.suppress(OSError):
                pair.client.shutdown(socket.SHUT_WR)  # the server's end, passed on

    def sever(self) -> None:
        """Lose every open connection: the client learns it only when it next sends."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.severed.set()
            with contextlib.suppress(OSError):
                pair.server.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and lose every open connection."""
        self._listener.close()
        self.sever()
