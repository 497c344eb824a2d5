"""Live events on the channel layer. The layer is a notification, not storage: a client
that missed an event catches up from the database by seq.

Sync code (services, tasks) hands events to one background sender with its own event loop,
so an append never waits on the channel layer and events leave in the order they were
handed over. Async code awaits `broadcast` directly.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def session_group(session_id: int) -> str:
    return f"qorven.session.{session_id}"


async def broadcast(session_id: int, event: dict[str, Any]) -> None:
    """Send `event` (with a `type` such as message.chunk) to everyone watching the session.
    Never raises: a live surface missing an event must not fail the work that made it."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(session_group(session_id), {"session_id": session_id, **event})
    except Exception:
        logger.warning("could not broadcast %s to session %s", event.get("type"), session_id, exc_info=True)


class _Sender:
    """One daemon thread running an event loop that sends queued events in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[int, dict[str, Any]] | None] | None = None
        self._pending = 0
        self._idle = threading.Condition()

    def submit(self, session_id: int, event: dict[str, Any]) -> None:
        loop, queue = self._ensure()
        with self._idle:
            self._pending += 1
        loop.call_soon_threadsafe(queue.put_nowait, (session_id, event))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted event has been sent (for tests and shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _ensure(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue]:
        with self._lock:
            if self._loop is None:
                ready = threading.Event()
                threading.Thread(target=self._run, args=(ready,), name="qorven-live", daemon=True).start()
                ready.wait()
            assert self._loop is not None and self._queue is not None
            return self._loop, self._queue

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._queue = asyncio.Queue()
        self._loop = loop
        ready.set()
        loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        assert self._queue is not None
        while True:
            item = await self._queue.get()
            if item is None:
                return
            try:
                await broadcast(*item)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()


_sender = _Sender()


def broadcast_soon(session_id: int, event: dict[str, Any]) -> None:
    """From sync code: queue `event` for the session's watchers and return at once."""
    _sender.submit(session_id, event)


def broadcast_flush(timeout: float = 10.0) -> bool:
    return _sender.flush(timeout)
