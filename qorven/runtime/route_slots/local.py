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
        self._queue: deque[object] = deque()
        self._held = 0
        # Each ticket in the queue: (when it first looked, until when it keeps its place).
        self._tickets: dict[object, tuple[float, float]] = {}
        self._wakes: dict[object, Wake] = {}  # the task of each waiting ticket not sent yet

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

    def enter(self, *, ticket: str, wake: Wake | None, cap: int, wait: float, lease: float) -> tuple[str, list[Wake]]:
        with self._cond:
            if not self._look(ticket=ticket, wake=wake, cap=cap, wait=wait):
                self._leave(ticket)
                raise SlotTimeout(f"no slot of {cap} freed within {wait:.0f} s")
            self._leave(ticket)
            self._held += 1
            return ticket, self._due(cap)

    def look(self, *, ticket: str, wake: Wake | None, cap: int, wait: float) -> None:
        with self._cond:
            if self._tickets.get(ticket, (0.0, 0.0))[1] < time.monotonic():
                return  # not waiting: its call takes the first look
            self._look(ticket=ticket, wake=wake, cap=cap, wait=wait)

    def leave(self, *, ticket: str, cap: int) -> list[Wake]:
        with self._cond:
            if ticket in self._queue:
                self._leave(ticket)
            return self._due(cap)

    def _look(self, *, ticket: str, wake: Wake | None, cap: int, wait: float) -> bool:
        """The ticket's look, under the lock: False past its wait, True when a slot is free
        for it; else it keeps its place (its task woken by the next slot freed for it)."""
        now = time.monotonic()
        since, until = self._tickets.get(ticket, (now, 0.0))
        if until < now:  # a first look, or a ticket that lapsed: to the back of the queue
            since = now
            if ticket in self._queue:
                self._queue.remove(ticket)
            self._queue.append(ticket)
        elif now - since > wait:
            return False
        self._tickets[ticket] = (since, now + slots.TICKET_PRESENCE)
        if self._first() == ticket and self._held < cap:
            self._wakes.pop(ticket, None)  # it is on its way: a slot freed meanwhile is the next one's
            return True
        if wake is not None:
            self._wakes[ticket] = wake
        raise SlotWait(slots._come_back(self._queue.index(ticket)))

    def _due(self, cap: int) -> list[Wake]:
        """The tasks to send now: of the tickets first in line for the slots free (each
        sent once; it names itself again when it looks and still waits)."""
        free = cap - self._held
        self._first()  # drops the lapsed tickets at the head
        due = []
        for waiter in list(self._queue)[:max(free, 0)]:
            if waiter in self._wakes:
                due.append(self._wakes.pop(waiter))
        return due

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
        self._wakes.pop(ticket, None)
        self._cond.notify_all()

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
