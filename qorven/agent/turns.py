"""One turn: answer the oldest unanswered user message of a session.

Turns on one session run one at a time, in seq order, across processes: a turn holds the
session's lease (a row-level lease, not a process lock) and answers pending user messages
oldest first. A message that arrives meanwhile is stored and shown at once (appends never
wait for the lease) and answered by the next iteration. Running the task twice is
harmless: an answered message is never answered again.

This module holds the order and the lease; how one message is answered is
qorven.agent.turn_answer's, how the answer is recorded qorven.agent.turn_endings'.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from memory_app.selectors import memories_held
from qorven.runtime import metrics
from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken
from qorven.runtime.log_context import log_context
from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.task_scope import task_checkpoint
from sessions_app.errors import SenderLeft, SessionClosed
from sessions_app.leases import LeaseLost, lease_kept
from sessions_app.models import Message, Session
from sessions_app.selectors import pending_with_session_query, session_for_task, session_successor
from sessions_app.turn_writes import (
    turn_lease_acquire,
    turn_lease_end,
    turn_lease_release,
)
from tenancy.switches import switches_seen, switches_seen_here
from tenancy.zones import person_zone_own_of

from .slot_places import slot_place_give_up
from .turn_answer import AnswerResult, AnswerStep, answer_message
from .turn_endings import not_a_member_end

logger = logging.getLogger(__name__)

# A turn's first read (sessions_app.selectors.pending_with_session: the message with its
# session, tenant, Qor, user, role and switches) with whether the person has any memory
# with the Qor (`memories_held`): a person with none costs no memory search; and the
# person's own timezone (`own_zone`), the dates of the memories found are shown in (a
# read of its own whenever memories were found, before).
_pending_for_turn: PreparedRead[Message] = PreparedRead(
    lambda tenant_id, session_id: pending_with_session_query(tenant_id, session_id).annotate(
        memories_held=memories_held(tenant="session__tenant_id", qor="session__qor_id", user="session__user_id"),
        own_zone=person_zone_own_of(tenant="session__tenant_id", user="session__user_id"))[:1],
    tenant_id=int, session_id=int,
)


class TurnBusy(Exception):
    """Another process holds the session's turn lease; try again shortly."""



@dataclass
class TurnOutcome:
    answered: int = 0
    failed: int = 0
    retry_after: float | None = None  # a message failed transiently: come back after this long


def turn_process(*, tenant_id: int, session_id: int, come_back_mark: Callable[[], None] | None = None,
                 woken: bool = False) -> TurnOutcome:
    """Answer every pending user message of the session, oldest first. Raises TurnBusy at
    once when another turn holds the session (the task comes back later).
    `come_back_mark` makes the calling task the session's come-back: run while the session
    is still held, when the outcome asks to come back, and (`woken`: a turn a freed slot
    sent) as soon as the session is held, as such a turn takes the come-back over.

    The session's lease is short (QORVEN_TURN_LEASE) and renewed while the turn runs, so a
    turn whose worker died frees its session within seconds. A message that fails for
    good is marked failed with one notice and the turn goes on to the next; one that
    fails transiently stays pending and the outcome says when to come back.
    """
    owner = uuid.uuid4().hex
    if not turn_lease_acquire(session_id=session_id, owner=owner, seconds=settings.QORVEN_TURN_LEASE):
        raise TurnBusy(session_id)
    if woken and come_back_mark is not None:
        come_back_mark()
    outcome = TurnOutcome()
    overflowed = False
    released = False
    kept = lease_kept(session_id=session_id, owner=owner)
    try:
        # The tool switches the answer reads come with its message (switches_seen).
        with kept, switches_seen_here():
            while True:
                if outcome.answered + outcome.failed:
                    kept.letting_go()
                    if turn_lease_end(tenant_id=tenant_id, session_id=session_id, owner=owner):
                        released = True
                        break  # the usual end: nothing left to answer, the session let go in one statement
                    kept.holding()
                    # More to answer: what was answered goes out now (a platform reply is
                    # sent), not once the messages after it are answered too.
                    task_checkpoint()
                # Usually one read: the message to answer, with its session.
                pending = _pending_for_turn.first(tenant_id=tenant_id, session_id=session_id)
                if pending is not None:
                    switches_seen(tenant_id=tenant_id, switched_off=pending.switched_off)  # type: ignore[attr-defined]
                if pending is not None and pending.session.state == Session.State.ACTIVE:
                    session = pending.session
                else:
                    found = session_for_task(tenant_id=tenant_id, session_id=session_id)
                    if found is None or found.state == Session.State.ACTIVE:
                        break  # gone, or nothing to answer
                    session = found
                if session.state != Session.State.ACTIVE:
                    if pending is not None:
                        # /clear ended its conversation while it waited for a capped route's
                        # slot: it is not answered, and its place would hold the calls behind it.
                        slot_place_give_up(session, pending)
                    # Rotated (/clear, /compact, manual compaction): what was still waiting for an
                    # answer was carried to the successor, so the turn follows it there.
                    successor = session_successor(session=session)
                    if successor is None or not turn_lease_acquire(
                        session_id=successor.pk, owner=owner, seconds=settings.QORVEN_TURN_LEASE
                    ):
                        break  # nothing to follow, or another turn is already on it
                    turn_lease_release(session_id=session_id, owner=owner)
                    session_id = successor.pk
                    kept.move(session_id)
                    continue
                assert pending is not None
                started = time.perf_counter()
                try:
                    with log_context(qor=session.qor_id, session=session.pk, seq=pending.seq):
                        try:
                            result = answer_message(session, pending, owner, overflowed=overflowed)
                        except SenderLeft as left:  # removed, or suspended, while the model thought:
                            # no tool ran, nothing was stored
                            not_a_member_end(session, pending, owner, reason=left.reason)
                            result = AnswerResult(AnswerStep.FAILED)
                except SessionClosed:
                    continue  # cleared or rotated mid-turn: the reply has no place to go
                if result.step in (AnswerStep.ANSWERED, AnswerStep.FAILED, AnswerStep.RETRY):
                    metrics.turns.labels(result.step.value).inc()
                    metrics.turn_seconds.observe(time.perf_counter() - started)
                overflowed = result.step is AnswerStep.ROTATED_ON_OVERFLOW
                if result.step in (AnswerStep.RETRY, AnswerStep.WAITING):
                    outcome.retry_after = result.retry_after
                    if come_back_mark is not None:
                        come_back_mark()  # the session still held: no turn woken for its slot has it yet
                    break
                if result.step is AnswerStep.FAILED:
                    outcome.failed += 1
                if result.step is AnswerStep.ANSWERED:
                    outcome.answered += 1
    except LeaseLost:
        # The lease ran out under us (a stall longer than the lease) and another turn may
        # hold the session now: this one stops without writing anything more.
        logger.warning("turn on session %s lost its lease; leaving the session to the turn holding it", session_id)
    finally:
        if not released:
            _let_go(session_id, owner)
    return outcome


def _let_go(session_id: int, owner: str) -> None:
    """Release the session's lease, on a fresh connection if a lost one ended the turn;
    if the database is still away the lease runs out by itself (QORVEN_TURN_LEASE)."""
    connections_drop_broken()
    try:
        turn_lease_release(session_id=session_id, owner=owner)
    except DATABASE_DOWN:
        connections_drop_broken()
