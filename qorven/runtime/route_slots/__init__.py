"""At most N model calls at once to one model server, across every process; calls beyond
the cap wait their turn, the tenants' in turn.

A model server's route is the host's, shared by every tenant, so its queue is one lane
per tenant (first come first served within it) and a rotation of the lanes with calls
waiting: the next slot goes to the first waiter of the first lane, whose lane then goes
to the back of the rotation; a lane new to the queue joins it at the back. The queue's
order is thus round robin by tenant: one tenant's burst (many people, group chats,
heartbeats at once) holds back another tenant's single call by one of its calls at most,
not by all of them, and a tenant alone on the route is served in arrival order. A ticket
names its tenant (`slot_ticket`), a call on its thread takes it from `slot_tenant` (every
tenant's call goes through qorven.llm.metered, which sets it); a call made for no tenant
(a doctor's check) waits in a lane of its own.

With REDIS_URL the slots live in Redis, shared by servers and workers: the lanes and the
rotation (lists) and the holders (a sorted set scored by when each holder's lease runs
out). One Lua script lets the waiter at the head of the queue in when fewer than N leases
are live. A holder that died frees its slot when its lease runs out, or as soon as its ticket
looks again (a ticket makes one call at a time: its turn, taken over, comes back); a waiter
that died (it stops refreshing its presence key) is dropped from the queue. On the embedded default there
is one process, and the slots are a condition in its memory.

A call made for a worker's task (inside `slot_ticket`) never waits on the worker's thread:
it looks once, and when no slot is free for it, it ends with SlotWait and its task comes
back on the worker's timer. Its ticket stays in the queue meanwhile, so it keeps its place
in its tenant's lane, and the task's next call looks for that ticket. A ticket may name
its task (`wake`): a holder that frees its slot, or a ticket that enters with slots still
free, sends the task of each ticket now first in line for a free slot again at once, so
the slot is not left idle until the timer (the timer stays, for a holder whose process
died and frees its slot only when its lease runs out). A ticket whose task never comes
back (lost with its process) lapses after TICKET_PRESENCE, and the queue goes on. A task
coming back looks first (`route_slot_look`), before it prepares its call.

Other calls wait on their thread, at most THREAD_WAIT: a heartbeat's run or a
summarizer's is several dependent model calls with what it did in between (tools run,
messages stored, a conversation's lease held by /compact), so it is not ended at each call,
and neither may it hold a worker slot from every other tenant for long. When the slots
cannot be read at all (Redis away), such a call does not wait on its thread either: it
ends with SlotWait, as a ticket's does, and its run comes back on the worker's timer (a
heartbeat's run, the summarizer), none of its tries used.

A call that waits longer than its wait, counted from its first look, gives up as the model
being unavailable: the turn comes back later, as for any transient failure.
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings


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


# A Celery task, by name, and its positional arguments: what comes back for a ticket.
Wake = tuple[str, list[Any]]

# A ticket, its wake, and its tenant's lane.
_ticket: ContextVar[tuple[str, Wake | None, str] | None] = ContextVar("route_slot_ticket", default=None)
_lane: ContextVar[str] = ContextVar("route_slot_lane", default="")  # of a call waiting on its thread


@contextmanager
def slot_ticket(ticket: str, *, tenant: int | None = None, wake: Wake | None = None) -> Iterator[None]:
    """Calls made inside wait for a slot as `ticket`, the same on every try of the task
    (a turn's: its message), in `tenant`'s lane: one look each, SlotWait when no slot is
    free for it. `wake`: the task sent again as soon as a slot is free for the ticket,
    before its timer; it must be safe to run twice (the task's own come-back still comes)."""
    token = _ticket.set((ticket, wake, _lane_of(tenant)))
    try:
        yield
    finally:
        _ticket.reset(token)


@contextmanager
def slot_tenant(tenant: int | None) -> Iterator[None]:
    """Calls made inside outside a ticket (a heartbeat's, a summarizer's: they wait on
    their thread) wait for a slot in `tenant`'s lane."""
    token = _lane.set(_lane_of(tenant))
    try:
        yield
    finally:
        _lane.reset(token)


def _lane_of(tenant: int | None) -> str:
    return "" if tenant is None else str(tenant)


@contextmanager
def route_slot(*, base_url: str, cap: int, wait: float, lease: float) -> Iterator[None]:
    """Hold one of the `cap` slots of the model server at `base_url` (0: no cap). Inside
    `slot_ticket`, raises SlotWait when none is free for the ticket now; outside, waits
    for one on this thread, up to `wait` or THREAD_WAIT (SlotTimeout). Either way,
    SlotWait when the slots cannot be read (Redis away): the caller comes back for them."""
    if cap <= 0:
        yield
        return
    slots = _slots(base_url)
    ticketed = _ticket.get()
    token: Any  # which holder frees the slot: a Redis waiter's id, a ticket, or a local waiter
    if ticketed is None:
        token = slots.acquire(lane=_lane.get(), cap=cap, wait=min(wait, THREAD_WAIT), lease=lease)
    else:
        ticket, wake, lane = ticketed
        token, due = slots.enter(ticket=ticket, lane=lane, wake=wake, cap=cap, wait=wait, lease=lease)
        _wake_send(due)  # slots still free: the next in line need not wait for their timer
    try:
        yield
    finally:
        _wake_send(slots.release(token, cap=cap))


def route_slot_look(*, base_url: str, cap: int, wait: float) -> None:
    """Inside `slot_ticket`, for a ticket waiting in the queue: raises SlotWait when a
    call made now would find no slot free for it, keeping its place as that call would;
    returns when one is free for it (the call takes it) or when it has waited past `wait`
    (the call gives up). A task that comes back for its slot looks before it prepares its
    call: most come-backs find the slot still taken. A ticket not waiting is not queued
    by a look (its call may never come: a turn that rotates its conversation first), nor
    is anything done outside a ticket or with no cap."""
    ticketed = _ticket.get()
    if cap <= 0 or ticketed is None:
        return
    ticket, wake, lane = ticketed
    _slots(base_url).look(ticket=ticket, lane=lane, wake=wake, cap=cap, wait=wait)


def route_slot_leave(*, base_url: str, cap: int) -> None:
    """Inside `slot_ticket`: the ticket gives up its place in the queue, if it has one, and
    the task of the next in line is sent if a slot is free for it. For a task that does
    other work before its call: calls of its own on their thread (a compaction's) would
    wait behind its place, kept for a call that comes only after them."""
    ticketed = _ticket.get()
    if cap <= 0 or ticketed is None:
        return
    _wake_send(_slots(base_url).leave(ticket=ticketed[0], lane=ticketed[2], cap=cap))


def route_slot_leave_queue(*, queue: str, cap: int) -> None:
    """As route_slot_leave, in the queue named `queue` (route_queue): for a ticket whose
    route may have changed since it queued."""
    ticketed = _ticket.get()
    if cap <= 0 or ticketed is None:
        return
    _wake_send(_slots_named(queue).leave(ticket=ticketed[0], lane=ticketed[2], cap=cap))


def route_queue(base_url: str) -> str:
    """The name of the queue of the model server at `base_url`: one per server, every
    route to it (any Qor's, any tenant's) waits there."""
    return _name(base_url)


def route_slot_waiting(*, base_url: str) -> int:
    """How many calls wait for a slot of the model server at `base_url` now, of every tenant."""
    return _slots(base_url).waiting()


def _name(base_url: str) -> str:
    return hashlib.sha256(base_url.strip().rstrip("/").encode()).hexdigest()[:24]


def _slots(base_url: str) -> _LocalSlots | _RedisSlots:
    return _slots_named(_name(base_url))


def _slots_named(name: str) -> _LocalSlots | _RedisSlots:
    return _RedisSlots(name) if settings.REDIS_URL else _local(name)


def _wake_send(wakes: list[Wake]) -> None:
    """Send the tasks of tickets a slot is free for now. One not sent comes back on its
    timer anyway."""
    if not wakes:
        return
    from celery import current_app

    for name, args in wakes:
        try:
            current_app.send_task(name, args=args)
        except Exception:
            logger.warning("could not send a task waiting for a model server slot; it comes back on its timer",
                           exc_info=True)


def _come_back(place: int) -> float:
    """Seconds before a ticket at `place` in the queue's order, round robin by tenant (0:
    its head), looks again."""
    return min(COME_BACK * (place + 1), COME_BACK_MOST)


# The two layouts; imported last, as they use the names above.
from .local import _local, _LocalSlots  # noqa: E402
from .shared import _RedisSlots  # noqa: E402
