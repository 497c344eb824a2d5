"""The slots of a model server with REDIS_URL, shared by every process: a queue of
waiters (a list) and the holders (a sorted set scored by when each lease runs out), moved
by Lua scripts so that each look is one step (qorven.runtime.route_slots)."""
from __future__ import annotations

import json
import logging
import time
import uuid

from qorven.runtime import route_slots as slots
from qorven.runtime.redis_client import install_key, shared_redis
from qorven.runtime.route_slots import SlotTimeout, SlotWait, Wake

logger = logging.getLogger("qorven.runtime.route_slots")

# KEYS: queue, holders, presence prefix, its wake key. ARGV: me, cap, now, lease end, take
# ("1": enter; "0": only say whether it could), its wake ("": none), presence.
_ENTER = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
while true do
  local head = redis.call('LINDEX', KEYS[1], 0)
  if not head then return 0 end
  if head == ARGV[1] or redis.call('EXISTS', KEYS[3] .. head) == 1 then break end
  redis.call('LPOP', KEYS[1])  -- a waiter that went away
end
if redis.call('LINDEX', KEYS[1], 0) == ARGV[1] and redis.call('ZCARD', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[4])  -- on its way: a slot freed meanwhile is the next one's
  if ARGV[5] == '1' then
    redis.call('LPOP', KEYS[1])
    redis.call('DEL', KEYS[3] .. ARGV[1])
    redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
  end
  return 1
end
if ARGV[6] ~= '' then redis.call('SET', KEYS[4], ARGV[6], 'EX', ARGV[7]) end
return 0
"""

# A ticket's look, before _ENTER: its presence (holding when it first looked) and its
# place, set together, so no other waiter takes it for one that went away. 0: it has
# waited past its wait (and gives up its place when ARGV[5] is "1", a call's look); 2:
# only looking, at a ticket not waiting. KEYS: queue, its presence key. ARGV: ticket,
# now, wait, presence, a call's look.
_LOOK = """
local since = redis.call('GET', KEYS[2])
if since and tonumber(ARGV[2]) - tonumber(since) > tonumber(ARGV[3]) then
  if ARGV[5] == '1' then
    redis.call('LREM', KEYS[1], 0, ARGV[1])
    redis.call('DEL', KEYS[2])
  end
  return 0
end
if not since then  -- a first look, or a ticket that lapsed: to the back of the queue
  if ARGV[5] ~= '1' then return 2 end  -- unless only looking: its call takes the first look
  since = ARGV[2]
  redis.call('LREM', KEYS[1], 0, ARGV[1])
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
redis.call('SET', KEYS[2], since, 'EX', ARGV[4])
return 1
"""

# The wakes due: a holder's slot freed (ARGV token; "": none), then the tasks of the
# waiters first in line for the slots free, each taken once. KEYS: holders, queue,
# presence prefix, wake prefix. ARGV: token, cap, now.
_DUE = """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local due = {}
if free <= 0 then return due end
for _, waiter in ipairs(redis.call('LRANGE', KEYS[2], 0, free + 15)) do
  if free <= 0 then break end
  if redis.call('EXISTS', KEYS[3] .. waiter) == 1 then  -- one that went away takes no slot
    free = free - 1
    local wake = redis.call('GET', KEYS[4] .. waiter)
    if wake then
      redis.call('DEL', KEYS[4] .. waiter)
      table.insert(due, wake)
    end
  end
end
return due
"""

class _RedisSlots:
    def __init__(self, name: str) -> None:
        self.queue = install_key(f"route-slots:{name}:queue")
        self.holders = install_key(f"route-slots:{name}:holders")
        self.presence = install_key(f"route-slots:{name}:waiting:")
        self.wakes = install_key(f"route-slots:{name}:wake:")

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
        client.set(self.presence + me, 1, ex=slots.PRESENCE)
        client.rpush(self.queue, me)
        try:
            while True:
                client.set(self.presence + me, 1, ex=slots.PRESENCE)
                now = time.time()
                if enter(keys=[self.queue, self.holders, self.presence, self.wakes + me],
                         args=[me, cap, now, now + lease, 1, "", slots.PRESENCE]):
                    return me
                if time.monotonic() > deadline:
                    client.lrem(self.queue, 0, me)
                    raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
                time.sleep(slots.POLL)
        finally:
            client.delete(self.presence + me)

    def enter(self, *, ticket: str, wake: Wake | None, cap: int, wait: float, lease: float) -> tuple[str, list[Wake]]:
        import redis

        try:
            entered = self._look(ticket=ticket, wake=wake, cap=cap, wait=wait, lease=lease, take=True)
        except redis.RedisError as exc:  # as for a waiter on its thread
            raise SlotTimeout(f"the model server's slots could not be read: {type(exc).__name__}") from None
        if not entered:
            raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
        try:
            return ticket, self._due("", cap=cap)
        except redis.RedisError:  # the next in line come back on their timer
            return ticket, []

    def look(self, *, ticket: str, wake: Wake | None, cap: int, wait: float) -> None:
        import redis

        try:
            self._look(ticket=ticket, wake=wake, cap=cap, wait=wait, lease=0, take=False)
        except redis.RedisError:  # the call itself finds out
            return

    def _look(self, *, ticket: str, wake: Wake | None, cap: int, wait: float, lease: float, take: bool) -> bool:
        """False past its wait; True when a slot is free for it (taken if `take`); else
        SlotWait, its place kept and its wake set."""
        client = shared_redis()
        now = time.time()
        look = client.register_script(_LOOK)
        looked = look(keys=[self.queue, self.presence + ticket],
                      args=[ticket, now, wait, slots.TICKET_PRESENCE, int(take)])
        if looked != 1:
            return looked == 2  # 2: not waiting, so not queued by a look (its call queues it)
        enter = client.register_script(_ENTER)
        if enter(keys=[self.queue, self.holders, self.presence, self.wakes + ticket],
                 args=[ticket, cap, now, now + lease, int(take), json.dumps(wake) if wake else "",
                       slots.TICKET_PRESENCE]):
            return True
        # Its place among the first few (LPOS would need Redis 6.0.6): further back, it
        # comes back after the longest wait anyway.
        ahead = client.lrange(self.queue, 0, int(slots.COME_BACK_MOST / slots.COME_BACK))
        raise SlotWait(slots._come_back(ahead.index(ticket.encode()) if ticket.encode() in ahead else len(ahead)))

    def leave(self, *, ticket: str, cap: int) -> list[Wake]:
        import redis

        try:
            client = shared_redis()
            with client.pipeline() as pipe:
                pipe.lrem(self.queue, 0, ticket)
                pipe.delete(self.presence + ticket, self.wakes + ticket)
                pipe.execute()
            return self._due("", cap=cap)
        except redis.RedisError:  # its place lapses instead
            logger.warning("could not leave a model server's queue; the place lapses", exc_info=True)
            return []

    def release(self, token: str, *, cap: int) -> list[Wake]:
        import redis

        try:
            return self._due(token, cap=cap)
        except redis.RedisError:  # the lease runs out instead
            logger.warning("could not free a model server slot; its lease frees it", exc_info=True)
            return []

    def _due(self, token: str, *, cap: int) -> list[Wake]:
        due = shared_redis().register_script(_DUE)
        woken = due(keys=[self.holders, self.queue, self.presence, self.wakes], args=[token, cap, time.time()])
        return [tuple(json.loads(w)) for w in woken]  # type: ignore[misc]
