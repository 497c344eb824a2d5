"""The slots of a model server with REDIS_URL, shared by every process: a lane of waiters
per tenant and the rotation of the lanes with waiters (lists), and the holders (a sorted
set scored by when each lease runs out), moved by Lua scripts so that each look is one
step (qorven.runtime.route_slots)."""
from __future__ import annotations

import json
import logging
import re
import time
import uuid

from qorven.runtime import route_slots as slots
from qorven.runtime.redis_client import install_key, shared_redis
from qorven.runtime.route_slots import SlotTimeout, SlotWait, Wake

logger = logging.getLogger("qorven.runtime.route_slots")

# The queue, in every script: ROT, the rotation (a list of lanes, each there once while a
# call waits in it); LANES, the prefix of each lane's key (a list of waiters).
_QUEUE = """
local function join(ROT, LANES, lane, waiter)  -- to the back of its lane, a new lane to the rotation's
  if redis.call('RPUSH', LANES .. lane, waiter) == 1 then redis.call('RPUSH', ROT, lane) end
end
local function quit(ROT, LANES, lane, waiter)
  if redis.call('LREM', LANES .. lane, 0, waiter) > 0 and redis.call('LLEN', LANES .. lane) == 0 then
    redis.call('LREM', ROT, 0, lane)
  end
end
-- The first n waiters in the order the slots go to them: round robin over the lanes, in
-- the rotation's order (the first n lanes hold them all), each lane first come first served.
local function order(ROT, LANES, n)
  if n <= 0 then return {} end
  local lanes = {}
  for _, lane in ipairs(redis.call('LRANGE', ROT, 0, n - 1)) do
    table.insert(lanes, redis.call('LRANGE', LANES .. lane, 0, n - 1))
  end
  local out = {}
  for k = 1, n do
    local more = false
    for _, waiters in ipairs(lanes) do
      if waiters[k] then
        more = true
        table.insert(out, waiters[k])
        if #out == n then return out end
      end
    end
    if not more then break end
  end
  return out
end
"""

# KEYS: rotation, lanes prefix, holders, presence prefix, its wake key. ARGV: me, cap, now,
# lease end, take ("1": enter; "0": only say whether it could), its wake ("": none),
# presence, places counted. -1: a slot is free for it (taken if asked); else its place
# (counted up to the places counted).
_ENTER = _QUEUE + """
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[3])
local head, lane
while true do
  lane = redis.call('LINDEX', KEYS[1], 0)
  if not lane then break end
  head = redis.call('LINDEX', KEYS[2] .. lane, 0)
  if head == ARGV[1] or (head and redis.call('EXISTS', KEYS[4] .. head) == 1) then break end
  if head then redis.call('LPOP', KEYS[2] .. lane) end  -- a waiter that went away
  if redis.call('LLEN', KEYS[2] .. lane) == 0 then redis.call('LPOP', KEYS[1]) end
end
if lane and head == ARGV[1] and redis.call('ZCARD', KEYS[3]) < tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[5])  -- on its way: a slot freed meanwhile is the next one's
  if ARGV[5] == '1' then  -- its lane, if calls still wait in it, to the back: the next slot is another's
    redis.call('LPOP', KEYS[2] .. lane)
    redis.call('LPOP', KEYS[1])
    if redis.call('LLEN', KEYS[2] .. lane) > 0 then redis.call('RPUSH', KEYS[1], lane) end
    redis.call('DEL', KEYS[4] .. ARGV[1])
    redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
  end
  return -1
end
if ARGV[6] ~= '' then redis.call('SET', KEYS[5], ARGV[6], 'EX', ARGV[7]) end
local ahead = order(KEYS[1], KEYS[2], tonumber(ARGV[8]))
for place, waiter in ipairs(ahead) do
  if waiter == ARGV[1] then return place - 1 end
end
return #ahead
"""

# A ticket's look, before _ENTER: its presence (holding when it first looked) and its
# place, set together, so no other waiter takes it for one that went away. First, a slot
# the ticket still holds is freed: a ticket makes one call at a time, so that is a try of
# its that died with its process (its task comes back, or is taken over, only once that
# try's turn is over), whose lease would otherwise keep the slot taken, from the ticket
# itself too, for as long as a call may run. {0, …}: it has waited past its wait (and
# gives up its place when ARGV[5] is "1", a call's look); {2, …}: only looking, at a
# ticket not waiting; then 1 if it freed a slot. KEYS: rotation, lanes prefix, its
# presence key, holders. ARGV: ticket, now, wait, presence, a call's look, its lane.
_LOOK = _QUEUE + """
local freed = redis.call('ZREM', KEYS[4], ARGV[1])
local since = redis.call('GET', KEYS[3])
if since and tonumber(ARGV[2]) - tonumber(since) > tonumber(ARGV[3]) then
  if ARGV[5] == '1' then
    quit(KEYS[1], KEYS[2], ARGV[6], ARGV[1])
    redis.call('DEL', KEYS[3])
  end
  return {0, freed}
end
if not since then  -- a first look, or a ticket that lapsed: to the back of its lane
  if ARGV[5] ~= '1' then return {2, freed} end  -- unless only looking: its call takes the first look
  since = ARGV[2]
  quit(KEYS[1], KEYS[2], ARGV[6], ARGV[1])
  join(KEYS[1], KEYS[2], ARGV[6], ARGV[1])
end
redis.call('SET', KEYS[3], since, 'EX', ARGV[4])
return {1, freed}
"""

# A waiter on its thread joins its lane. KEYS: rotation, lanes prefix. ARGV: me, its lane.
_JOIN = _QUEUE + "join(KEYS[1], KEYS[2], ARGV[2], ARGV[1])"

# A waiter gives up its place. KEYS: rotation, lanes prefix, its presence and wake keys.
# ARGV: it, its lane.
_LEAVE = _QUEUE + """
quit(KEYS[1], KEYS[2], ARGV[2], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4])
"""

# How many wait, in every lane. KEYS: rotation, lanes prefix.
_WAITING = """
local n = 0
for _, lane in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do n = n + redis.call('LLEN', KEYS[2] .. lane) end
return n
"""

# The wakes due: a holder's slot freed (ARGV token; "": none), then the tasks of the
# waiters first in line for the slots free, each taken once. KEYS: holders, rotation,
# lanes prefix, presence prefix, wake prefix. ARGV: token, cap, now.
_DUE = _QUEUE + """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1]) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local due = {}
if free <= 0 then return due end
for _, waiter in ipairs(order(KEYS[2], KEYS[3], free + 16)) do
  if free <= 0 then break end
  if redis.call('EXISTS', KEYS[4] .. waiter) == 1 then  -- one that went away takes no slot
    free = free - 1
    local wake = redis.call('GET', KEYS[5] .. waiter)
    if wake then
      redis.call('DEL', KEYS[5] .. waiter)
      table.insert(due, wake)
    end
  end
end
return due
"""

# A queue of the single first-come queue before the lanes (`route-slots:<name>:queue`, a
# list that never expired) is deleted unless a waiter of a process still running the old
# code is in it (its presence key, `waiting:`, lives). KEYS: the queue, its presence prefix.
# 1 when deleted (or gone already).
_LEGACY_REMOVE = """
for _, waiter in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', KEYS[2] .. waiter) == 1 then return 0 end
end
redis.call('DEL', KEYS[1])
return 1
"""
LEGACY_DONE = "route-slots:single-queues-removed"


def legacy_queues_remove() -> int:
    """Delete the single queues the model servers' slots kept before the lanes, which
    nothing reads since; once per install (a key marks it done), at a process's start.
    Returns the queues deleted. A queue with a waiter still present (a process of the
    old code not yet stopped) is kept, and the next start looks again."""
    client = shared_redis()
    done = install_key(LEGACY_DONE)
    if client.exists(done):
        return 0
    remove = client.register_script(_LEGACY_REMOVE)
    removed, kept = 0, 0
    # Keys ending in ":queue" exactly: a lane's is "…:queue:<tenant>".
    pattern = re.sub(r"([*?\[\]\\])", r"\\\1", install_key("route-slots:")) + "*:queue"
    for key in client.scan_iter(match=pattern, count=1000, _type="list"):
        queue = key.decode() if isinstance(key, bytes) else str(key)
        if remove(keys=[queue, queue.removesuffix(":queue") + ":waiting:"]):
            removed += 1
        else:
            kept += 1
    if not kept:
        client.set(done, 1)
    if removed or kept:
        logger.info("model server slots: %s single queue(s) of before the lanes removed, %s kept while in use",
                    removed, kept)
    return removed


class _RedisSlots:
    def __init__(self, name: str) -> None:
        self.rotation = install_key(f"route-slots:{name}:rotation")
        self.lanes = install_key(f"route-slots:{name}:queue:")
        self.holders = install_key(f"route-slots:{name}:holders")
        # "waiter:", not the single queue's "waiting:": a ticket that waited in it looks as new.
        self.presence = install_key(f"route-slots:{name}:waiter:")
        self.wakes = install_key(f"route-slots:{name}:wake:")

    def acquire(self, *, lane: str = "", cap: int, wait: float, lease: float) -> str:
        import redis

        try:
            return self._acquire(lane=lane, cap=cap, wait=wait, lease=lease)
        except redis.RedisError as exc:
            # Redis away: the call comes back for the slots later, as a ticket does. Not
            # waited for on this thread (it may be away for long), nor the slots counted
            # as busy: the run (a heartbeat's, the summarizer's) comes back on its timer.
            logger.warning("the model server's slots could not be read (%s); the call comes back for them",
                           type(exc).__name__)
            raise SlotWait(slots.COME_BACK_MOST) from None

    def _acquire(self, *, lane: str, cap: int, wait: float, lease: float) -> str:
        client = shared_redis()
        me = uuid.uuid4().hex
        enter = client.register_script(_ENTER)
        deadline = time.monotonic() + wait
        client.set(self.presence + me, 1, ex=slots.PRESENCE)
        client.register_script(_JOIN)(keys=[self.rotation, self.lanes], args=[me, lane])
        try:
            while True:
                client.set(self.presence + me, 1, ex=slots.PRESENCE)
                now = time.time()
                if enter(keys=[self.rotation, self.lanes, self.holders, self.presence, self.wakes + me],
                         args=[me, cap, now, now + lease, 1, "", slots.PRESENCE, 0]) < 0:
                    return me
                if time.monotonic() > deadline:
                    self._quit(me, lane)
                    raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
                time.sleep(slots.POLL)
        finally:
            client.delete(self.presence + me)

    def enter(self, *, ticket: str, lane: str = "", wake: Wake | None, cap: int, wait: float,
              lease: float) -> tuple[str, list[Wake]]:
        import redis

        try:
            entered = self._look(ticket=ticket, lane=lane, wake=wake, cap=cap, wait=wait, lease=lease, take=True)
        except redis.RedisError as exc:
            # Redis away: the ticket comes back for its slot later, as for a slot taken. The
            # model server is not at fault, and its message keeps its tries (as a slot
            # busy past its wait, it used one, and failed with the last).
            logger.warning("the model server's slots could not be read (%s); the call comes back for them",
                           type(exc).__name__)
            raise SlotWait(slots.COME_BACK_MOST) from None
        if not entered:
            raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
        try:
            return ticket, self._due("", cap=cap)
        except redis.RedisError:  # the next in line come back on their timer
            return ticket, []

    def look(self, *, ticket: str, lane: str = "", wake: Wake | None, cap: int, wait: float) -> None:
        import redis

        try:
            self._look(ticket=ticket, lane=lane, wake=wake, cap=cap, wait=wait, lease=0, take=False)
        except redis.RedisError:  # the call itself finds out
            return

    def _look(self, *, ticket: str, lane: str, wake: Wake | None, cap: int, wait: float, lease: float,
              take: bool) -> bool:
        """False past its wait; True when a slot is free for it (taken if `take`); else
        SlotWait, its place kept and its wake set."""
        client = shared_redis()
        now = time.time()
        look = client.register_script(_LOOK)
        looked, freed = look(keys=[self.rotation, self.lanes, self.presence + ticket, self.holders],
                             args=[ticket, now, wait, slots.TICKET_PRESENCE, int(take), lane])
        if freed:  # a dead try's slot: the first in line for it need not wait for their timer
            slots._wake_send(self._due("", cap=cap))
        if looked != 1:
            return looked == 2  # 2: not waiting, so not queued by a look (its call queues it)
        enter = client.register_script(_ENTER)
        # Its place counted among the first few only: further back, it comes back after the
        # longest wait anyway.
        place = enter(keys=[self.rotation, self.lanes, self.holders, self.presence, self.wakes + ticket],
                      args=[ticket, cap, now, now + lease, int(take), json.dumps(wake) if wake else "",
                            slots.TICKET_PRESENCE, int(slots.COME_BACK_MOST / slots.COME_BACK) + 1])
        if place < 0:
            return True
        raise SlotWait(slots._come_back(place))

    def leave(self, *, ticket: str, lane: str = "", cap: int) -> list[Wake]:
        import redis

        try:
            self._quit(ticket, lane)
            return self._due("", cap=cap)
        except redis.RedisError:  # its place lapses instead
            logger.warning("could not leave a model server's queue; the place lapses", exc_info=True)
            return []

    def _quit(self, waiter: str, lane: str) -> None:
        shared_redis().register_script(_LEAVE)(
            keys=[self.rotation, self.lanes, self.presence + waiter, self.wakes + waiter], args=[waiter, lane])

    def waiting(self) -> int:
        return int(shared_redis().register_script(_WAITING)(keys=[self.rotation, self.lanes]))

    def release(self, token: str, *, cap: int) -> list[Wake]:
        import redis

        try:
            return self._due(token, cap=cap)
        except redis.RedisError:  # the lease runs out instead
            logger.warning("could not free a model server slot; its lease frees it", exc_info=True)
            return []

    def _due(self, token: str, *, cap: int) -> list[Wake]:
        due = shared_redis().register_script(_DUE)
        woken = due(keys=[self.holders, self.rotation, self.lanes, self.presence, self.wakes],
                    args=[token, cap, time.time()])
        return [tuple(json.loads(w)) for w in woken]  # type: ignore[misc]
