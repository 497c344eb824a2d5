"""A waiting message's place in the queue of a capped model route (`max_concurrency`,
qorven.runtime.route_slots). A turn waits for a slot as its message's ticket, the same on
every try, so the message keeps its place in first-come order; a place kept for a call
that will not come holds every later call to that server, any tenant's, until it lapses
(TICKET_PRESENCE). So:

- A message notes the ticket it waits as (`slot_ticket` in its metadata) when it first
  waits. A compaction carries the note with the message's copy: the copy waits as its
  original did, in its place, instead of queueing anew at the back while that place lapses.
  A message without the note never waited: its end costs the slots nothing.
- Whose queue the place is in (its server's queue and cap, `slot_queue`) is noted beside
  the ticket, written only when it changes (its first wait, a route changed): a message
  that comes back to find its Qor's route changed gives the old place up at once, and one
  that ends gives it up wherever it is. Kept with the message, not in the cache: a note
  the cache lost while the place stayed (evicted, or a write Redis refused as it blinked)
  left the place behind to lapse, and reading it was one more round trip on every
  come-back.
- A /compact holds the conversation while it calls the summarizer's route: when that
  route is the waiting message's server, the message gives its place up first (its call
  can only come after the compaction's, which would wait behind it).
"""
from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from qorven.llm import WaitingForSlot, routes_for
from qorven.runtime.route_slots import route_queue, route_slot_leave_queue, slot_ticket
from sessions_app.models import Message, Session
from sessions_app.selectors import next_pending_user_message
from sessions_app.turn_writes import message_slot_ticket_note

# Logged as the turn, as qorven.agent.turn_endings is: one logger for all a turn does.
logger = logging.getLogger("qorven.agent.turns")

TURN_TASK = "qorven.agent.turn"  # qorven.agent.tasks.agent_turn, sent by name: the tasks import this module
NOTE = "slot_ticket"
QUEUE = "slot_queue"  # [the server's queue (route_queue), its cap]


def message_slot_ticket(session: Session, pending: Message) -> AbstractContextManager[None]:
    """A capped route's slot is waited for on the worker's timer, as this message (or the
    message it was carried from): its every try looks for the same place in the queue. A
    slot freed for it sends the session's turn at once, woken (safe twice: an answered
    message is never answered again), which ends the come-back the turn had asked for
    (qorven.agent.tasks). It waits in its tenant's turn: the route's queue goes round the
    tenants waiting."""
    return slot_ticket(_ticket(pending), tenant=session.tenant_id,
                       wake=(TURN_TASK, [session.tenant_id, session.pk, 0, True]))


def slot_place_note(pending: Message, waiting: WaitingForSlot) -> None:
    """`pending` waits for a slot, its place kept in the queue `waiting` names."""
    queue = [route_queue(waiting.base_url), waiting.cap] if waiting.base_url else pending.metadata.get(QUEUE)
    if NOTE not in pending.metadata or pending.metadata.get(QUEUE) != queue:
        message_slot_ticket_note(message=pending, ticket=_ticket(pending), queue=queue)


def slot_place_moved(session: Session, pending: Message) -> None:
    """Before a waiting message looks for its slot again: its place in the queue of a
    server its Qor's main role no longer calls with a cap (the admin changed the route)
    is given up at once; it queues on the route it has now."""
    if NOTE in pending.metadata:
        _give_up(pending, unless_on=_capped_servers(session, "main"))


def slot_place_give_up(session: Session, pending: Message) -> None:
    """The message's place, if it has one, given up: it ends, or is no longer to be
    answered. A failure to reach the slots loses nothing the message needs: the place
    lapses by itself."""
    if NOTE not in pending.metadata:
        return  # it never waited
    from qorven.llm import provider_for_role

    _give_up(pending, unless_on=_capped_servers(session, "main"))
    try:
        with message_slot_ticket(session, pending):
            provider_for_role(session.qor, "main").slot_leave()
    except Exception:
        logger.warning("could not give up the place of message %s in its model server's queue; it lapses",
                       pending.seq, exc_info=True)


def slot_places_before_compact(session: Session) -> None:
    """Before a /compact holding `session` calls the summarizer: the waiting message's
    place in the queue of the summarizer's server is given up (memory_app.compaction's
    hook). Kept, it held the compaction's calls, which wait on their thread, until they
    gave up (THREAD_WAIT), and /compact failed."""
    pending = next_pending_user_message(session=session)
    if pending is not None and NOTE in pending.metadata:
        _give_up(pending, on=_capped_servers(session, "summarizer"))


def _give_up(pending: Message, *, on: set[str] | None = None, unless_on: set[str] | None = None) -> None:
    """Give up the message's place where its note says it is: if that server's queue is in
    `on`, or not in `unless_on`."""
    place = pending.metadata.get(QUEUE)
    if not place:
        return
    queue = str(place[0])
    if (on is not None and queue not in on) or (unless_on is not None and queue in unless_on):
        return
    try:
        with slot_ticket(_ticket(pending), tenant=pending.tenant_id):
            route_slot_leave_queue(queue=queue, cap=int(place[1]))
    except Exception:
        logger.warning("could not give up the place of message %s in its model server's queue; it lapses",
                       pending.seq, exc_info=True)


def _ticket(pending: Message) -> str:
    return str(pending.metadata.get(NOTE) or f"message:{pending.pk}")


def _capped_servers(session: Session, role: str) -> set[str]:
    """The queues of the role's capped routes."""
    return {route_queue(r.base_url) for r in routes_for(session.qor, role) if r.max_concurrency}  # type: ignore[arg-type]
