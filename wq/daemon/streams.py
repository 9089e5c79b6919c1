"""Text streams answered while they are written (a task's output), each read from a
blocking iterator on a thread of its own, so that a silent stream holds no thread of
the pool other requests are served from, and a slow reader holds at most a few chunks."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

log = logging.getLogger("wq.daemon")

# Chunks read ahead of a slow client, at most.
READ_AHEAD = 16


class TooManyStreams(Exception):
    """Every stream slot is taken."""


class StreamSlots:
    """A bound on the streams open at once (each holds a thread while it lasts)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()
        # Set when the daemon stops: open streams end at once rather than holding the
        # HTTP server's shutdown until their runs end.
        self.closing = threading.Event()

    def close(self) -> None:
        """End every open stream (within a second) and refuse new ones."""
        self.closing.set()

    def full(self) -> bool:
        """Whether a new stream would find no slot now."""
        return self.open >= self.limit

    def take(self) -> None:
        """Take a slot, or raise `TooManyStreams`."""
        with self._lock:
            if self.open >= self.limit:
                raise TooManyStreams(f"{self.open} output streams are open, the most allowed")
            self.open += 1

    def give_back(self) -> None:
        """Free a slot taken with `take`."""
        with self._lock:
            self.open -= 1


async def relay(
    chunks: Iterator[str],
    slots: StreamSlots,
    disconnected: Callable[[], Awaitable[bool]],
    name: str,
) -> AsyncIterator[str]:
    """The iterator's chunks as they come; `""` chunks are the iterator's pauses, where
    a gone client is noticed. An error ends the stream with a line that says why. The
    thread holds one of `slots` while it lasts."""
    try:
        slots.take()
    except TooManyStreams as err:
        yield f"wq: {err}; try again shortly\n"
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    room = threading.Semaphore(READ_AHEAD)
    stop = threading.Event()

    def hand(kind: str, text: str) -> bool:
        while not room.acquire(timeout=1.0):
            if stop.is_set():
                return False
        if stop.is_set():
            return False
        try:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, text))
        except RuntimeError:  # the event loop is closed: the daemon has stopped
            return False
        return True

    def produce() -> None:
        try:
            for chunk in chunks:
                if not hand("chunk", chunk):
                    return
            hand("end", "")
        except Exception as err:  # the stream ends with a line that says why
            reason = str(err) or type(err).__name__
            log.warning("the output stream of %s stopped: %s", name, reason)
            hand("error", reason)
        finally:
            slots.give_back()

    threading.Thread(target=produce, name=f"wq-stream {name}", daemon=True).start()
    try:
        while True:
            try:
                kind, text = await asyncio.wait_for(queue.get(), timeout=1.0)
            except TimeoutError:  # the reader waits on its run: look around meanwhile
                kind, text = "", ""
            else:
                room.release()
            if slots.closing.is_set():
                yield "\nwq: the daemon is stopping; follow again to go on\n"
                return
            if kind == "end":
                return
            if kind == "error":
                yield f"\nwq: the output stopped: {text}\n"
                return
            if text:
                yield text
            elif await disconnected():
                return
    finally:
        stop.set()
