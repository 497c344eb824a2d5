"""The embedded default's channel layer: in memory, safe across threads and event loops.

Channels' own InMemoryChannelLayer keeps an `asyncio.Queue` per channel, which only works
when every sender and receiver share one event loop. Qorven's senders do not: consumers
run on Daphne's loop, while turns stream tokens from the in-process task thread and the
live sender (qorven.runtime.publisher) runs a loop of its own. A `put_nowait` from another thread
resolves the waiting consumer's future without waking its loop, so the event sits there
until something else happens to wake Daphne — or corrupts the queue outright.

Here messages live in plain deques under one lock; a receiver waiting on an empty channel
parks a future on its own loop, and a sender wakes it with `call_soon_threadsafe`. The
woken receiver takes the message itself, so nothing is lost or reordered if two wake-ups
race. Semantics otherwise match InMemoryChannelLayer: capacity per channel, message
expiry (an expired message drops its channel from every group), group expiry, flush.

Channels' layer sweeps every channel and every group on each send and receive, so one
event to N sockets costs O(N²). Here expiry is kept in arrival order instead (messages and
group joins each get a queue of deadlines, and a channel knows its groups), so a sweep
touches only what has actually expired. Messages are copied per receiver with a copy made
for the layer's own types (dicts, lists, scalars: what every layer must be able to
serialise) rather than `deepcopy`.
"""
from __future__ import annotations

import asyncio
import random
import string
import threading
import time
from collections import deque
from copy import deepcopy
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer


class _Channel:
    __slots__ = ("messages", "waiters")

    def __init__(self) -> None:
        self.messages: deque[tuple[float, dict[str, Any]]] = deque()
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []


_SCALARS = (str, int, float, bool, bytes, type(None))


def _copy(value: Any) -> Any:
    """A copy for a receiver: what a layer message may hold, without deepcopy's memo."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_copy(item) for item in value)
    return deepcopy(value)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class InMemoryChannelLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(self, expiry: int = 60, group_expiry: int = 86400, capacity: int = 100,
                 channel_capacity: dict | None = None, **kwargs: Any) -> None:
        super().__init__(expiry=expiry, capacity=capacity, channel_capacity=channel_capacity, **kwargs)
        self.group_expiry = group_expiry
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._channels: dict[str, _Channel] = {}
        self._groups: dict[str, dict[str, float]] = {}
        self._memberships: dict[str, set[str]] = {}  # channel -> the groups it is in
        # deadlines in the order they were set: (expires at, channel) per message put and
        # (joined at, group, channel) per join; entries a later event made stale are skipped
        self._message_deadlines: deque[tuple[float, str]] = deque()
        self._joins: deque[tuple[float, str, str]] = deque()
        self._joins_limit = 1024

    # --- channels ---

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        with self._lock:
            self._clean_expired()
        self._put(channel, _copy(message))

    def _put(self, channel: str, message: dict[str, Any]) -> None:
        with self._lock:
            box = self._channels.setdefault(channel, _Channel())
            if len(box.messages) >= self.get_capacity(channel):
                raise ChannelFull(channel)
            deadline = time.monotonic() + self.expiry
            box.messages.append((deadline, message))
            self._message_deadlines.append((deadline, channel))
            waiters, box.waiters = box.waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_wake, future)
            except RuntimeError:  # that receiver's loop has closed: it no longer waits
                pass

    async def receive(self, channel: str) -> dict[str, Any]:
        self.require_valid_channel_name(channel)
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                self._clean_expired()
                box = self._channels.setdefault(channel, _Channel())
                if box.messages:
                    _, message = box.messages.popleft()
                    if not box.messages and not box.waiters:
                        self._channels.pop(channel, None)
                    return message
                future: asyncio.Future[None] = loop.create_future()
                box.waiters.append((loop, future))
            try:
                await future
            except asyncio.CancelledError:
                with self._lock:
                    box = self._channels.get(channel)
                    if box is not None:
                        box.waiters = [w for w in box.waiters if w[1] is not future]
                        if not box.messages and not box.waiters:
                            self._channels.pop(channel, None)
                raise

    async def new_channel(self, prefix: str = "specific.") -> str:
        return "%s.inmemory!%s" % (prefix, "".join(random.choice(string.ascii_letters) for _ in range(12)))

    def _clean_expired(self) -> None:
        """Drop expired messages (their channel leaves every group) and expired group
        memberships, visiting only deadlines that have passed. Called with the lock held."""
        now = time.monotonic()
        deadlines = self._message_deadlines
        while deadlines and deadlines[0][0] < now:
            _, name = deadlines.popleft()
            box = self._channels.get(name)
            if box is None:
                continue
            expired = False
            while box.messages and box.messages[0][0] < now:
                box.messages.popleft()
                expired = True
            if expired:
                for group in self._memberships.pop(name, ()):
                    self._leave(group, name)
            if not box.messages and not box.waiters:
                self._channels.pop(name, None)
        cutoff = now - self.group_expiry
        joins = self._joins
        while joins and joins[0][0] < cutoff:
            joined, group, name = joins.popleft()
            if self._groups.get(group, {}).get(name) == joined:  # not re-joined since
                self._leave(group, name)
                groups = self._memberships.get(name)
                if groups is not None:
                    groups.discard(group)
                    if not groups:
                        self._memberships.pop(name, None)

    def _compact_joins(self) -> None:
        """Drop the join deadlines that leaves and re-joins made stale, so sockets that come
        and go all day do not grow the queue. Amortised: runs once the queue has doubled."""
        current = sorted(
            (joined, group, name) for group, members in self._groups.items() for name, joined in members.items()
        )
        self._joins = deque(current)
        self._joins_limit = 1024 + 2 * len(current)

    def _leave(self, group: str, channel: str) -> None:
        members = self._groups.get(group)
        if members is not None:
            members.pop(channel, None)
            if not members:
                self._groups.pop(group, None)

    # --- flush extension ---

    async def flush(self) -> None:
        with self._lock:
            self._reset()

    async def close(self) -> None:
        pass

    # --- groups extension ---

    def has_members(self, group: str) -> bool:
        """Whether anyone in this process listens to `group` (cheap, any thread)."""
        with self._lock:
            return bool(self._groups.get(group))

    async def group_add(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        with self._lock:
            joined = time.monotonic()
            self._groups.setdefault(group, {})[channel] = joined
            self._memberships.setdefault(channel, set()).add(group)
            self._joins.append((joined, group, channel))
            if len(self._joins) > self._joins_limit:
                self._compact_joins()

    async def group_discard(self, group: str, channel: str) -> None:
        self.require_valid_channel_name(channel)
        self.require_valid_group_name(group)
        with self._lock:
            self._leave(group, channel)
            groups = self._memberships.get(channel)
            if groups is not None:
                groups.discard(group)
                if not groups:
                    self._memberships.pop(channel, None)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_group_name(group)
        with self._lock:
            self._clean_expired()
            members = list(self._groups.get(group, {}))
        for channel in members:
            try:
                self._put(channel, _copy(message))
            except ChannelFull:
                pass  # a full channel misses this event; the client catches up by seq
