"""A cheap open-loop HTTP/1.1 load generator for benchmarks/api.py.

httpx cost the benchmark about 1-2 ms of CPU per request (its client, its
connection pool, h11 and anyio), more once the daemon fell behind; at 200 requests/s
the client alone then took a core of this 2-core machine beside the daemon and
PostgreSQL it measured. Here each request is a pre-encoded byte string written to
a keep-alive connection, and an answer is parsed just enough to know its status and
where it ends (`Content-Length`; uvicorn sends it for every answer of the API): some
tens of microseconds per request.

Open loop: a request is sent when it is due, whatever the earlier ones take. It
takes an idle connection, or opens one (there is no upper bound but the timeout),
so a slow server builds a backlog of connections rather than slowing the load down;
latency counts from the moment the request was due.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field


def encode_request(
    method: str,
    target: str,
    host: str,
    token: str | None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """One HTTP/1.1 request as bytes, with a Bearer token (unless None), other
    `headers` and an optional JSON body."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[int] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes) -> asyncio.Future[int]:
        """Write a request; a future of the answer's status code."""
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if length is None:  # not one of the API's answers: give up on this connection
            self._fail(ConnectionError("an answer without Content-Length"))
            return
        if len(self.buffer) < end + 4 + length:
            return
        status = int(lines[0][9:12])
        del self.buffer[: end + 4 + length]
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(status)

    def _fail(self, error: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(exc or ConnectionError("connection closed"))

    def close(self) -> None:
        """Close the connection (a request whose answer is late cannot share it)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


@dataclass
class Outcome:
    """What an open loop got back."""

    latencies: list[float]  # ms from due to answer, of the 2xx answers, sorted
    errors: int  # other than 2xx and 503, no answer within the timeout, a broken connection
    shed: int  # 503: refused by an overloaded server (or during a database outage)
    sent: int


@dataclass
class Pool:
    """Keep-alive connections to one server; a new one whenever none is idle."""

    host: str
    port: int
    idle: list[_Connection] = field(default_factory=list)
    opened: int = 0

    async def request(self, data: bytes) -> int:
        """Send one pre-encoded request; the answer's status code."""
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed:
                break
        else:
            loop = asyncio.get_running_loop()
            _, connection = await loop.create_connection(
                lambda: _Connection(self), self.host, self.port
            )
            self.opened += 1
        try:
            status = await connection.send(data)
        except BaseException:
            connection.close()
            raise
        self.idle.append(connection)
        return status

    def close(self) -> None:
        """Close every idle connection."""
        for connection in self.idle:
            connection.close()
        self.idle.clear()


async def closed_loop(pool: Pool, requests: list[bytes], senders: int) -> list[int]:
    """Send `requests` over `senders` connections, each waiting for its answer before
    sending the next (as a webhook sender does): the answers' status codes, in order.
    The pool's connections are closed at the end."""
    statuses = [0] * len(requests)

    async def sender(first: int) -> None:
        for index in range(first, len(requests), senders):
            statuses[index] = await pool.request(requests[index])

    try:
        await asyncio.gather(*(sender(first) for first in range(senders)))
    finally:
        pool.close()
    return statuses


async def open_loop(
    rate: float,
    seconds: float,
    next_request: Callable[[], tuple[Pool, bytes]],
    timeout: float,
    phase: float = 0.0,
) -> Outcome:
    """Send `next_request()` (a request and the server's pool to send it to) at `rate`
    per second for `seconds`: what came back (`Outcome`).

    `phase` (a fraction of one interval) delays every start, so that loops running
    side by side do not send their requests at the same instants.
    """
    latencies: list[float] = []
    errors = shed = 0
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def one(due: float, pool: Pool, data: bytes) -> None:
        nonlocal errors, shed
        try:
            status = await asyncio.wait_for(pool.request(data), timeout)
        except (TimeoutError, OSError):
            errors += 1
            return
        if status == 503:
            shed += 1
            return
        if not 200 <= status < 300:
            errors += 1
            return
        latencies.append((loop.time() - due) * 1000)

    count = int(rate * seconds)
    tasks = []
    for n in range(count):
        due = start + (n + phase) / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(due, *next_request())))
    await asyncio.gather(*tasks)
    return Outcome(sorted(latencies), errors, shed, count)
