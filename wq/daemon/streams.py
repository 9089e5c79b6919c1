"""Text streams answered while they are written (a task's output), each read from a
blocking iterator on a thread of its own, so that a silent stream holds no thread of
the pool other requests are served from, and a slow reader holds at most a few chunks."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

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

    def take(self) -> StreamSlot:
        """Take a slot, or raise `TooManyStreams`."""
        with self._lock:
            if self.open >= self.limit:
                raise TooManyStreams(f"{self.limit} output streams are open, the most allowed")
            self.open += 1
        return StreamSlot(self)

    def _give_back(self) -> None:
        with self._lock:
            self.open -= 1


class StreamSlot:
    """One slot of `StreamSlots`, taken before the answer starts (a 503 can still be
    sent then) and given back once: by the stream's thread when it ends, or by its
    response (`SlotStream`) if the stream never started."""

    def __init__(self, slots: StreamSlots) -> None:
        self.slots = slots
        self.started = False  # a thread reads the stream: it gives the slot back
        self._held = True
        self._lock = threading.Lock()

    def give_back(self) -> None:
        """Free the slot (again: nothing)."""
        with self._lock:
            held, self._held = self._held, False
        if held:
            self.slots._give_back()


class SlotStream(StreamingResponse):
    """A streamed answer that holds a slot: given back even if its stream never started
    (the client went before its first chunk)."""

    def __init__(self, content: AsyncIterator[str], slot: StreamSlot, **options: Any) -> None:
        super().__init__(content, **options)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the answer; then the slot goes back unless a thread holds it still."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.slot.started:
                self.slot.give_back()


async def relay(
    chunks: Iterator[str],
    slot: StreamSlot,
    disconnected: Callable[[], Awaitable[bool]],
    name: str,
) -> AsyncIterator[str]:
    """The iterator's chunks as they come; `""` chunks are the iterator's pauses, where
    a gone client is noticed. An error ends the stream with a line that says why. The
    thread that reads the iterator holds `slot` while it lasts."""
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
            slot.give_back()

    threading.Thread(target=produce, name=f"wq-stream {name}", daemon=True).start()
    slot.started = True
    try:
        while True:
            try:
                kind, text = await asyncio.wait_for(queue.get(), timeout=1.0)
            except TimeoutError:  # the reader waits on its run: look around meanwhile
                kind, text = "", ""
            else:
                room.release()
            if slot.slots.closing.is_set():
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
