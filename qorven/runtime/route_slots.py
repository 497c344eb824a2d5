"""At most N model calls at once to one model server, across every process; calls beyond
the cap wait their turn in arrival order.

With REDIS_URL the slots live in Redis, shared by servers and workers: a queue of waiters
(a list, first come first served) and the holders (a sorted set scored by when each
holder's lease runs out). One Lua script lets the waiter at the head of the queue in when
fewer than N leases are live. A holder that died frees its slot when its lease runs out; a
waiter that died (it stops refreshing its presence key) is dropped from the queue. On the
embedded default there is one process, and the slots are a condition in its memory.

A call made for a worker's task (inside `slot_ticket`) never waits on the worker's thread:
it looks once, and when no slot is free for it, it ends with SlotWait and its task comes
back on the worker's timer. Its ticket stays in the queue meanwhile, so it keeps its place
in first-come order, and the task's next call looks for that ticket. A ticket whose task
never comes back (lost with its process) lapses after TICKET_PRESENCE, and the queue goes
on. Other calls wait on their thread, at most THREAD_WAIT: a heartbeat's run or a
summarizer's is several dependent model calls with what it did in between (tools run,
messages stored, a conversation's lease held by /compact), so it is not ended at each call,
and neither may it hold a worker slot from every other tenant for long.

A call that waits longer than its wait, counted from its first look, gives up as the model
being unavailable: the turn comes back later, as for any transient failure.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings

from qorven.runtime.redis_client import install_key, shared_redis

logger = logging.getLogger(__name__)

POLL = 0.02  # seconds between the looks at the queue of a Redis waiter on its thread
PRESENCE = 5  # seconds a Redis waiter's presence key lives without a refresh
# Seconds a ticket keeps its place without its task coming back: past the longest time
# asked to come back (COME_BACK_MOST), with room for a worker busy when it is due.
TICKET_PRESENCE = 30
THREAD_WAIT = 8.0  # seconds a call outside slot_ticket waits for a slot on its thread, at most
COME_BACK = 0.5  # seconds to come back after, for each waiter ahead in the queue and this one
COME_BACK_MOST = 3.0


class SlotTimeout(Exception):
    """No slot freed within the wait allowed."""


class SlotWait(Exception):
    """No slot is free for this ticket now: it keeps its place, and its task comes back
    after `after` seconds to look again."""

    def __init__(self, after: float) -> None:
        super().__init__(f"waiting for a slot; back in {after:.1f} s")
        self.after = after


_ticket: ContextVar[str | None] = ContextVar("route_slot_ticket", default=None)


@contextmanager
def slot_ticket(ticket: str) -> Iterator[None]:
    """Calls made inside wait for a slot as `ticket`, the same on every try of the task
    (a turn's: its message): one look each, SlotWait when no slot is free for it."""
    token = _ticket.set(ticket)
    try:
        yield
    finally:
        _ticket.reset(token)


@contextmanager
def route_slot(*, base_url: str, cap: int, wait: float, lease: float) -> Iterator[None]:
    """Hold one of the `cap` slots of the model server at `base_url` (0: no cap). Inside
    `slot_ticket`, raises SlotWait when none is free for the ticket now; outside, waits
    for one on this thread, up to `wait` or THREAD_WAIT (SlotTimeout)."""
    if cap <= 0:
        yield
        return
    name = _name(base_url)
    slots = _RedisSlots(name) if settings.REDIS_URL else _local(name)
    ticket = _ticket.get()
    if ticket is None:
        token = slots.acquire(cap=cap, wait=min(wait, THREAD_WAIT), lease=lease)
    else:
        token = slots.enter(ticket=ticket, cap=cap, wait=wait, lease=lease)
    try:
        yield
    finally:
        slots.release(token)


def route_slot_waiting(*, base_url: str) -> int:
    """How many calls wait for a slot of the model server at `base_url` now."""
    name = _name(base_url)
    if settings.REDIS_URL:
        return int(shared_redis().llen(_RedisSlots(name).queue))
    slots = _local(name)
    with slots._cond:
        return len(slots._queue)


def _name(base_url: str) -> str:
    return hashlib.sha256(base_url.strip().rstrip("/").encode()).hexdigest()[:24]


def _come_back(place: int) -> float:
    """Seconds before a ticket at `place` in the queue (0: its head) looks again."""
    return min(COME_BACK * (place + 1), COME_BACK_MOST)


# --- in this process (the embedded default) ---

class _LocalSlots:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._held = 0
        # Each ticket in the queue: (when it first looked, until when it keeps its place).
        self._tickets: dict[object, tuple[float, float]] = {}

    def acquire(self, *, cap: int, wait: float, lease: float) -> object:
        me = object()
        deadline = time.monotonic() + wait
        with self._cond:
            self._queue.append(me)
            try:
                while not (self._first() is me and self._held < cap):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
                    self._cond.wait(min(left, self._head_lapses()))
            finally:
                self._queue.remove(me)
                self._cond.notify_all()  # the next waiter may be at the head now
            self._held += 1
        return me

    def enter(self, *, ticket: str, cap: int, wait: float, lease: float) -> str:
        now = time.monotonic()
        with self._cond:
            since, until = self._tickets.get(ticket, (now, 0.0))
            if until < now:  # a first look, or a ticket that lapsed: to the back of the queue
                since = now
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._queue.append(ticket)
            elif now - since > wait:
                self._leave(ticket)
                raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
            self._tickets[ticket] = (since, now + TICKET_PRESENCE)
            if self._first() == ticket and self._held < cap:
                self._leave(ticket)
                self._held += 1
                return ticket
            raise SlotWait(_come_back(self._queue.index(ticket)))

    def _first(self) -> object:
        """The head of the queue, once the tickets that lapsed before it are dropped."""
        now = time.monotonic()
        while self._queue and self._tickets.get(self._queue[0], (0.0, now))[1] < now:
            self._leave(self._queue[0])
        return self._queue[0] if self._queue else None

    def _head_lapses(self) -> float:
        """Seconds until the ticket at the head lapses (a waiter on a thread waits no longer)."""
        head = self._queue[0] if self._queue else None
        return max(self._tickets[head][1] - time.monotonic(), 0.01) if head in self._tickets else 3600.0

    def _leave(self, ticket: object) -> None:
        self._queue.remove(ticket)
        self._tickets.pop(ticket, None)
        self._cond.notify_all()

    def release(self, token: object) -> None:
        with self._cond:
            self._held -= 1
            self._cond.notify_all()


_locals: dict[str, _LocalSlots] = {}
_locals_lock = threading.Lock()


def _local(name: str) -> _LocalSlots:
    with _locals_lock:
        return _locals.setdefault(name, _LocalSlots())


# --- across processes (Redis) ---

# KEYS: queue, holders, presence prefix. ARGV: me, cap, now, lease end.
_ENTER = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
while true do
  local head = redis.call('LINDEX', KEYS[1], 0)
  if not head then return 0 end
  if head == ARGV[1] or redis.call('EXISTS', KEYS[3] .. head) == 1 then break end
  redis.call('LPOP', KEYS[1])  -- a waiter that went away
end
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then return 0 end
redis.call('LPOP', KEYS[1])
redis.call('DEL', KEYS[3] .. ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return 1
"""

# A ticket's look, before _ENTER: its presence (holding when it first looked) and its
# place, set together, so no other waiter takes it for one that went away. 0: it has
# waited past its wait. KEYS: queue, its presence key. ARGV: ticket, now, wait, presence.
_LOOK = """
local since = redis.call('GET', KEYS[2])
if since and tonumber(ARGV[2]) - tonumber(since) > tonumber(ARGV[3]) then
  redis.call('LREM', KEYS[1], 0, ARGV[1])
  redis.call('DEL', KEYS[2])
  return 0
end
if not since then  -- a first look, or a ticket that lapsed: to the back of the queue
  since = ARGV[2]
  redis.call('LREM', KEYS[1], 0, ARGV[1])
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], since, 'EX', ARGV[4])
return 1
"""

class _RedisSlots:
    def __init__(self, name: str) -> None:
        self.queue = install_key(f"route-slots:{name}:queue")
        self.holders = install_key(f"route-slots:{name}:holders")
        self.presence = install_key(f"route-slots:{name}:waiting:")

    def acquire(self, *, cap: int, wait: float, lease: float) -> str:
        import redis

        try:
            return self._acquire(cap=cap, wait=wait, lease=lease)
        except redis.RedisError as exc:  # the slots cannot be read: the call waits for Redis like the rest
            raise SlotTimeout(f"the model server's slots could not be read: {type(exc).__name__}") from None

    def _acquire(self, *, cap: int, wait: float, lease: float) -> str:
        client = shared_redis()
        me = uuid.uuid4().hex
        enter = client.register_script(_ENTER)
        deadline = time.monotonic() + wait
        client.set(self.presence + me, 1, ex=PRESENCE)
        client.rpush(self.queue, me)
        try:
            while True:
                client.set(self.presence + me, 1, ex=PRESENCE)
                if enter(keys=[self.queue, self.holders, self.presence], args=[me, cap, time.time(),
                                                                              time.time() + lease]):
                    return me
                if time.monotonic() > deadline:
                    client.lrem(self.queue, 0, me)
                    raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
                time.sleep(POLL)
        finally:
            client.delete(self.presence + me)

    def enter(self, *, ticket: str, cap: int, wait: float, lease: float) -> str:
        import redis

        try:
            return self._enter(ticket=ticket, cap=cap, wait=wait, lease=lease)
        except redis.RedisError as exc:  # as for a waiter on its thread
            raise SlotTimeout(f"the model server's slots could not be read: {type(exc).__name__}") from None

    def _enter(self, *, ticket: str, cap: int, wait: float, lease: float) -> str:
        client = shared_redis()
        now = time.time()
        look = client.register_script(_LOOK)
        if not look(keys=[self.queue, self.presence + ticket], args=[ticket, now, wait, TICKET_PRESENCE]):
            raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
        enter = client.register_script(_ENTER)
        if enter(keys=[self.queue, self.holders, self.presence], args=[ticket, cap, now, now + lease]):
            return ticket
        # Its place among the first few (LPOS would need Redis 6.0.6): further back, it
        # comes back after the longest wait anyway.
        ahead = client.lrange(self.queue, 0, int(COME_BACK_MOST / COME_BACK))
        raise SlotWait(_come_back(ahead.index(ticket.encode()) if ticket.encode() in ahead else len(ahead)))

    def release(self, token: str) -> None:
        import redis

        try:
            shared_redis().zrem(self.holders, token)
        except redis.RedisError:  # the lease runs out instead
            logger.warning("could not free a model server slot; its lease frees it", exc_info=True)
