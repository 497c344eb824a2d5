"""The slots of a model server on the embedded default: one process, a condition in its
memory (qorven.runtime.route_slots)."""
from __future__ import annotations

import threading
import time
from collections import deque

from qorven.runtime import route_slots as slots
from qorven.runtime.route_slots import SlotTimeout, SlotWait, Wake


class _LocalSlots:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        # Each tenant's lane of waiters, first come first served; the dict's order is the
        # rotation (a lane is there while a call waits in it).
        self._lanes: dict[str, deque[object]] = {}
        self._lane_of: dict[object, str] = {}  # the lane of each waiter
        self._held = 0
        # Each ticket in the queue: (when it first looked, until when it keeps its place).
        self._tickets: dict[object, tuple[float, float]] = {}
        self._wakes: dict[object, Wake] = {}  # the task of each waiting ticket not sent yet

    def acquire(self, *, lane: str = "", cap: int, wait: float, lease: float) -> object:
        me = object()
        deadline = time.monotonic() + wait
        with self._cond:
            self._join(me, lane)
            try:
                while not (self._first() is me and self._held < cap):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
                    self._cond.wait(min(left, self._head_lapses()))
            except BaseException:
                self._leave(me)  # the next waiter may be at the head now
                raise
            self._take(me)
        return me

    def enter(self, *, ticket: str, lane: str = "", wake: Wake | None, cap: int, wait: float,
              lease: float) -> tuple[str, list[Wake]]:
        with self._cond:
            if not self._look(ticket=ticket, lane=lane, wake=wake, cap=cap, wait=wait):
                self._leave(ticket)
                raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
            self._take(ticket)
            return ticket, self._due(cap)

    def look(self, *, ticket: str, lane: str = "", wake: Wake | None, cap: int, wait: float) -> None:
        with self._cond:
            if self._tickets.get(ticket, (0.0, 0.0))[1] < time.monotonic():
                return  # not waiting: its call takes the first look
            self._look(ticket=ticket, lane=lane, wake=wake, cap=cap, wait=wait)

    def leave(self, *, ticket: str, lane: str = "", cap: int) -> list[Wake]:
        with self._cond:
            if ticket in self._lane_of:
                self._leave(ticket)
            return self._due(cap)

    def waiting(self) -> int:
        with self._cond:
            return len(self._lane_of)

    def _look(self, *, ticket: str, lane: str, wake: Wake | None, cap: int, wait: float) -> bool:
        """The ticket's look, under the lock: False past its wait, True when a slot is free
        for it; else it keeps its place (its task woken by the next slot freed for it)."""
        now = time.monotonic()
        since, until = self._tickets.get(ticket, (now, 0.0))
        if until < now:  # a first look, or a ticket that lapsed: to the back of its lane
            since = now
            if ticket in self._lane_of:
                self._leave(ticket)
            self._join(ticket, lane)
        elif now - since > wait:
            return False
        self._tickets[ticket] = (since, now + slots.TICKET_PRESENCE)
        if self._first() == ticket and self._held < cap:
            self._wakes.pop(ticket, None)  # it is on its way: a slot freed meanwhile is the next one's
            return True
        if wake is not None:
            self._wakes[ticket] = wake
        raise SlotWait(slots._come_back(self._order().index(ticket)))

    def _due(self, cap: int) -> list[Wake]:
        """The tasks to send now: of the tickets first in line for the slots free (each
        sent once; it names itself again when it looks and still waits)."""
        free = cap - self._held
        self._first()  # drops the lapsed tickets at the head
        due = []
        for waiter in self._order()[:max(free, 0)]:
            if waiter in self._wakes:
                due.append(self._wakes.pop(waiter))
        return due

    def _order(self) -> list[object]:
        """The waiters in the order the slots go to them: round robin over the lanes, in
        the rotation's order, each lane first come first served."""
        lanes = list(self._lanes.values())
        rounds = max((len(lane) for lane in lanes), default=0)
        return [lane[n] for n in range(rounds) for lane in lanes if n < len(lane)]

    def _first(self) -> object:
        """The head of the queue, once the tickets that lapsed before it are dropped."""
        now = time.monotonic()
        while (head := self._head()) is not None and self._tickets.get(head, (0.0, now))[1] < now:
            self._leave(head)
        return head

    def _head(self) -> object:
        return next(iter(self._lanes.values()))[0] if self._lanes else None

    def _head_lapses(self) -> float:
        """Seconds until the ticket at the head lapses (a waiter on a thread waits no longer)."""
        head = self._head()
        return max(self._tickets[head][1] - time.monotonic(), 0.01) if head in self._tickets else 3600.0

    def _join(self, waiter: object, lane: str) -> None:
        """To the back of its lane; a lane new to the queue to the back of the rotation."""
        self._lanes.setdefault(lane, deque()).append(waiter)
        self._lane_of[waiter] = lane

    def _take(self, waiter: object) -> None:
        """The head takes a slot; its lane, if calls still wait in it, goes to the back of
        the rotation: the next slot is the next tenant's."""
        lane = self._lane_of[waiter]
        waiters = self._lanes.pop(lane)
        waiters.popleft()
        if waiters:
            self._lanes[lane] = waiters
        self._forget(waiter)
        self._held += 1

    def _leave(self, waiter: object) -> None:
        lane = self._lane_of[waiter]
        self._lanes[lane].remove(waiter)
        if not self._lanes[lane]:
            del self._lanes[lane]
        self._forget(waiter)

    def _forget(self, waiter: object) -> None:
        del self._lane_of[waiter]
        self._tickets.pop(waiter, None)
        self._wakes.pop(waiter, None)
        self._cond.notify_all()  # the next waiter may be at the head now

    def release(self, token: object, *, cap: int) -> list[Wake]:
        with self._cond:
            self._held -= 1
            self._cond.notify_all()  # a waiter on its thread
            return self._due(cap)  # a ticket's task


_locals: dict[str, _LocalSlots] = {}
_locals_lock = threading.Lock()


def _local(name: str) -> _LocalSlots:
    with _locals_lock:
        return _locals.setdefault(name, _LocalSlots())
