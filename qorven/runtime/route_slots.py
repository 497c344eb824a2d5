"""At most N model calls at once to one model server, across every process; calls beyond
the cap wait their turn in arrival order.

With REDIS_URL the slots live in Redis, shared by servers and workers: a queue of waiters
(a list, first come first served) and the holders (a sorted set scored by when each
holder's lease runs out). One Lua script lets the waiter at the head of the queue in when
fewer than N leases are live. A holder that died frees its slot when its lease runs out; a
waiter that died (it stops refreshing its presence key) is dropped from the queue. On the
embedded default there is one process, and the slots are a condition in its memory.

A call that waits longer than its own timeout gives up as the model being unavailable:
the turn comes back later, as for any transient failure.
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

from django.conf import settings

from qorven.runtime.redis_client import install_key, shared_redis

logger = logging.getLogger(__name__)

POLL = 0.02  # seconds between a Redis waiter's looks at the queue
PRESENCE = 5  # seconds a Redis waiter's presence key lives without a refresh


class SlotTimeout(Exception):
    """No slot freed within the wait allowed."""


@contextmanager
def route_slot(*, base_url: str, cap: int, wait: float, lease: float) -> Iterator[None]:
    """Hold one of the `cap` slots of the model server at `base_url` (0: no cap)."""
    if cap <= 0:
        yield
        return
    name = _name(base_url)
    slots = _RedisSlots(name) if settings.REDIS_URL else _local(name)
    token = slots.acquire(cap=cap, wait=wait, lease=lease)
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


# --- in this process (the embedded default) ---

class _LocalSlots:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._held = 0

    def acquire(self, *, cap: int, wait: float, lease: float) -> object:
        me = object()
        deadline = time.monotonic() + wait
        with self._cond:
            self._queue.append(me)
            try:
                while not (self._queue[0] is me and self._held < cap):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
                    self._cond.wait(left)
            finally:
                self._queue.remove(me)
                self._cond.notify_all()  # the next waiter may be at the head now
            self._held += 1
        return me

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
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
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

    def release(self, token: str) -> None:
        import redis

        try:
            shared_redis().zrem(self.holders, token)
        except redis.RedisError:  # the lease runs out instead
            logger.warning("could not free a model server slot; its lease frees it", exc_info=True)
