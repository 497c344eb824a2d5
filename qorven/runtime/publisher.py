"""Live events on the channel layer. The layer is a notification, not storage: a client
that missed an event catches up from the database by seq.

Sync code (services, tasks) hands events to one background sender with its own event loop,
so an append never waits on the channel layer and events leave in the order they were
handed over. Async code awaits `broadcast` directly.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import caches

from .hub import LOCAL_TO, hubs_hand
from .layers import InMemoryChannelLayer
from .repeated_failure import RepeatedFailure
from .streams import stream_track

logger = logging.getLogger(__name__)


def session_group(session_id: int) -> str:
    return f"qorven.session.{session_id}"


def chat_group(tenant_id: int, qor_id: int, user_id: int) -> str:
    """Everyone watching a person's canonical chat with a Qor, whichever session it is in
    now: told when a new session starts (first message, /clear, compaction)."""
    return f"qorven.chat.{tenant_id}.{qor_id}.{user_id}"


async def broadcast(session_id: int, event: dict[str, Any]) -> None:
    """Send `event` (with a `type` such as message.chunk) to everyone watching the session.
    Streamed chunks are also kept for clients that reconnect mid-reply (qorven.runtime.streams).
    Never raises: a live surface missing an event must not fail the work that made it."""
    if get_channel_layer() is None:
        return
    event = _session_event(session_id, stream_track(session_id, event))
    await _group_send(event["group"], event)


_broadcast_failures = RepeatedFailure(logger, "could not broadcast live events")


def _session_event(session_id: int, event: dict[str, Any]) -> dict[str, Any]:
    return {"session_id": session_id, **event, "group": session_group(session_id)}


async def _group_send(group: str, event: dict[str, Any], handed: list[str] | None = None) -> None:
    """`event` (naming its `group`) to this process's hubs, unless it was `handed` to them
    already, and through the layer to everyone else."""
    layer = get_channel_layer()
    if layer is None:
        return
    if handed is None:
        handed = hubs_hand(group, event)
    try:
        await layer.group_send(group, {**event, LOCAL_TO: handed} if handed else event)
    except Exception:
        _broadcast_failures.failed(f"{event.get('type')} to {group}")
    else:
        _broadcast_failures.succeeded()


_layer_held = RepeatedFailure(logger, "the live layer held an event past QORVEN_REDIS_TIMEOUT: events go to this "
                                      "process's sockets only, their copies for the layer dropped")

_Item = tuple[str, dict[str, Any], list[str] | None]


class _Batch:
    """Events the sender's loop sends, and how far it got: past the bound, the thread hands
    the rest to this process's hubs itself and the loop leaves them (`let_go`)."""

    __slots__ = ("items", "at", "let_go")

    def __init__(self, items: list[_Item]) -> None:
        self.items = items
        self.at = 0  # the event being sent: handed to the hubs already, its layer copy on its way
        self.let_go = False


class _Sender:
    """One daemon thread that sends queued events in order, on an event loop of its own.

    Handing an event over is a queue put. When nothing is queued ahead of it, an event
    that sockets of this process watch is also handed to their hub there and then (it
    cannot overtake anything), so it does not wait for this thread to be scheduled: a
    millisecond or two while the request that stored it goes on to queue its turn. The
    thread sends the layer's copy. A chunk always waits its turn here: it is written to
    the stream buffer first (qorven.runtime.streams).

    The layer's Redis connections have no socket timeout (qorven.runtime.live_redis says
    why), so a Redis that holds a PUBLISH would hold every event behind it, for every chat
    of the process. The thread waits for a batch QORVEN_REDIS_TIMEOUT at most, without
    cancelling it: past that, the rest of it, and every batch until the held send is done,
    goes to this process's hubs only, each in order, and their copies for the layer are
    dropped (the layer is a notification: other processes' pages catch up from the
    database by seq). The held send goes on whenever the loop runs next: it is done once
    Redis answers, or fails once the system has closed its connection (on a dropped route,
    twice QORVEN_REDIS_TIMEOUT: qorven.runtime.live_redis).
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self._idle = threading.Condition()

    def submit(self, group: str, event: dict[str, Any]) -> None:
        """Queue `event`, naming its `group` (and for a session, its `session_id`)."""
        with self._idle:
            handed = None if self._pending or event.get("type") in _STREAM_EVENTS else hubs_hand(group, event)
            self._pending += 1
        if handed:
            # Let the hub's loop have the interpreter now: it waited ~1 ms (p50) for this
            # thread to block or reach its switch interval, while the event's sockets waited.
            time.sleep(0)
        self._queue.put((group, event, handed))
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="qorven-live", daemon=True)
                    self._thread.start()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted event has been sent (for tests and shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        # Django keeps a cache client per context (asgiref's Local), and each
        # run_until_complete below runs in a fresh copy of this thread's context: unless
        # the client is made here first, every batch made its own, and on Redis opened a
        # new connection for its stream-buffer write (~2 ms, before the event could leave).
        caches["default"]
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        held: asyncio.Task | None = None  # a batch whose send the layer holds past the bound
        while True:
            items = [self._queue.get()]
            while not self._queue.empty():  # under load, one wake-up sends many events
                items.append(self._queue.get_nowait())
            try:
                if held is not None:  # its loop runs only here: it goes on if Redis answers now
                    loop.run_until_complete(asyncio.wait({held}, timeout=0.01))
                    if held.done():
                        held = None
                        _layer_held.succeeded()
                if held is None:
                    held = self._send_within(loop, _Batch(items))
                else:
                    self._hand_here(items)
            finally:
                with self._idle:
                    self._pending -= len(items)
                    self._idle.notify_all()

    def _send_within(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> asyncio.Task | None:
        """Send `batch`, waiting QORVEN_REDIS_TIMEOUT at most; its task if the layer holds it.
        asyncio.wait, not wait_for: the send is left to go on, never cancelled (a cancelled
        read of redis-py's reads on for ever: qorven.runtime.live_redis)."""
        sending = loop.create_task(self._send(batch))
        loop.run_until_complete(asyncio.wait({sending}, timeout=settings.QORVEN_REDIS_TIMEOUT))
        if sending.done():
            return None
        batch.let_go = True
        try:
            raise TimeoutError(f"a live event held for {settings.QORVEN_REDIS_TIMEOUT} s")
        except TimeoutError:
            _layer_held.failed(f"{batch.items[batch.at][1].get('type')} to {batch.items[batch.at][0]}")
        self._hand_here(batch.items[batch.at + 1:])
        return sending

    @staticmethod
    async def _send(batch: _Batch) -> None:
        for at, (group, event, handed) in enumerate(batch.items):
            if batch.let_go:  # the thread handed the rest to the hubs
                return
            batch.at = at
            if event.get("type") in _STREAM_EVENTS:
                event = stream_track(event["session_id"], event)
            await _group_send(group, event, handed)

    @staticmethod
    def _hand_here(items: list[_Item]) -> None:
        """`items` to this process's hubs only (those not handed to them already)."""
        for group, event, handed in items:
            if event.get("type") in _STREAM_EVENTS:
                event = stream_track(event["session_id"], event)
            if handed is None:
                hubs_hand(group, event)


_sender = _Sender()


# Events that keep the stream buffer in step must always go through the sender.
_STREAM_EVENTS = frozenset({"message.chunk", "message.restart", "message.done"})


def nobody_watches(group: str) -> bool:
    """True only when certainly nobody listens to `group`: on the in-process layer, a group
    with no member in this process has no listener anywhere. Sync code skips building and
    handing over events then (most of an append's cost when no page is open); a client
    joining a moment later catches up from the database by seq."""
    layer = get_channel_layer()
    return isinstance(layer, InMemoryChannelLayer) and not layer.has_members(group)


def _nobody_listening(group: str, event: dict[str, Any]) -> bool:
    return event.get("type") not in _STREAM_EVENTS and nobody_watches(group)


def broadcast_soon(session_id: int, event: dict[str, Any]) -> None:
    """From sync code: queue `event` for the session's watchers and return at once."""
    if _nobody_listening(session_group(session_id), event):
        return
    event = _session_event(session_id, event)
    _sender.submit(event["group"], event)


def broadcast_group_soon(group: str, event: dict[str, Any]) -> None:
    """From sync code: queue `event` for another group (a chat_group), in the same order
    as session events."""
    if _nobody_listening(group, event):
        return
    _sender.submit(group, {**event, "group": group})


def broadcast_flush(timeout: float = 10.0) -> bool:
    return _sender.flush(timeout)
