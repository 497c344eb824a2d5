"""What a turn writes besides its messages: its session's lease and its answered marks.

Every turn takes its session's lease, extends it as it stores an answer, marks the message
answered and lets the session go. These writes are plain statements, few and folded
together where one statement can do the work of several: compiling an ORM update costs
more than running it (~0.25 ms of Python against ~0.06 ms on SQLite), and on PostgreSQL
each statement is a round trip. Django's cursor runs them, so errors are Django's and
query counting sees them.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from qorven.runtime.prepared_read import PreparedRead

from .append_statement import reply_condition, reply_refusal
from .errors import LeaseLost
from .models import Message, Session
from .selectors import answerable
from .services.append import Answering, message_append


def _write(sql: str, params: list[Any]) -> int:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _moment(value: datetime) -> Any:
    """A datetime as this database stores it (as the ORM adapts it)."""
    return connections[DEFAULT_DB_ALIAS].ops.adapt_datetimefield_value(value)


def _postgres() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def turn_lease_acquire(*, session_id: int, owner: str, seconds: int) -> bool:
    """Try to take the session's turn lease (one turn at a time, across processes).
    Succeeds when the lease is free, expired, or already ours."""
    now = timezone.now()
    return _write(
        "UPDATE sessions_app_session SET turn_owner = %s, turn_lease_until = %s WHERE id = %s"
        " AND (turn_lease_until IS NULL OR turn_lease_until < %s OR turn_owner = %s)",
        [owner, _moment(now + timedelta(seconds=seconds)), session_id, _moment(now), owner],
    ) == 1


def turn_lease_release(*, session_id: int, owner: str) -> None:
    _write("UPDATE sessions_app_session SET turn_owner = '', turn_lease_until = NULL"
           " WHERE id = %s AND turn_owner = %s", [session_id, owner])


def turn_leases_end_all() -> int:
    """Let go of every session's lease: for a process starting with nothing of its own
    running yet, whose previous run held its layout's every turn and is gone (the embedded
    default's server killed outright). A lease that run left would keep its session's
    waiting messages unanswered until it ran out (QORVEN_TURN_LEASE). How many there were."""
    return Session.objects.exclude(turn_lease_until=None).update(turn_owner="", turn_lease_until=None)


def turn_lease_confirm(*, session_id: int, owner: str) -> None:
    """Make sure `owner` still holds the session's lease, and extend it. Raises LeaseLost
    otherwise: in a transaction, before writing a reply, it keeps a turn that stalled past
    its lease from answering what another turn now answers."""
    if not _write(
        "UPDATE sessions_app_session SET turn_lease_until = %s WHERE id = %s AND turn_owner = %s",
        [_moment(timezone.now() + timedelta(seconds=settings.QORVEN_TURN_LEASE)), session_id, owner],
    ):
        raise LeaseLost(session_id)


def turn_leases_renew(*, held: dict[str, int], seconds: int) -> list[str]:
    """Extend the leases `held` (owner → session id) by `seconds`; the owners whose lease
    was no longer theirs."""
    until = timezone.now() + timedelta(seconds=seconds)
    return [
        owner for owner, session_id in held.items()
        if not Session.objects.filter(pk=session_id, turn_owner=owner).update(turn_lease_until=until)
    ]


def turn_answer_record(*, message: Message, owner: str, member: bool = False) -> None:
    """In the transaction that stores the reply to user message `message`: confirm and
    extend `owner`'s lease (LeaseLost if it is no longer theirs, as turn_lease_confirm),
    confirm the workspace is served (WorkspaceSuspended if the host suspended it), with
    `member` that the session's person is still a member of its tenant (SenderLeft if not),
    mark the message answered and move the session's progress past it (never back). One
    statement on PostgreSQL, two on SQLite."""
    until = _moment(timezone.now() + timedelta(seconds=settings.QORVEN_TURN_LEASE))
    seq, session_id = message.seq, message.session_id
    db = connections[DEFAULT_DB_ALIAS]
    held = f"turn_owner = %s AND {reply_condition(db, member=member)}"
    if _postgres():
        with db.cursor() as cursor:
            cursor.execute(
                "WITH held AS (UPDATE sessions_app_session SET turn_lease_until = %s,"
                f" replied_through_seq = GREATEST(replied_through_seq, %s) WHERE id = %s AND {held}"
                " RETURNING id), marked AS (UPDATE sessions_app_message SET answer_state = %s WHERE id = %s"
                " AND EXISTS (SELECT 1 FROM held)) SELECT count(*) FROM held",
                [until, seq, session_id, owner, Message.Answer.ANSWERED, message.pk],
            )
            kept = cursor.fetchone()[0]
    else:
        kept = _write(
            "UPDATE sessions_app_session SET turn_lease_until = %s, replied_through_seq = MAX(replied_through_seq, %s)"
            f" WHERE id = %s AND {held}",
            [until, seq, session_id, owner],
        ) and _write("UPDATE sessions_app_message SET answer_state = %s WHERE id = %s",
                     [Message.Answer.ANSWERED, message.pk])
    if not kept:
        # A person who left or a suspended workspace, told apart from a lost lease (read only on this path).
        reply_refusal(db, session_id=session_id, owner=owner, member=member)
        raise LeaseLost(session_id)
    message.answer_state = Message.Answer.ANSWERED


def reply_store(*, session: Session, answers: Message, owner: str, content: str, channel: str, sender_name: str,
                metadata: dict[str, Any], member: bool = False) -> Message:
    """Store a turn's reply to user message `answers` with the answered marks, once the
    lease is confirmed still `owner`'s (else LeaseLost, and nothing is written; SessionClosed
    when the session was archived meanwhile), that the workspace is still served (else
    WorkspaceSuspended, nothing written: the host may have suspended it while the model
    thought) and, with `member`, that the session's person is still an active member of its
    tenant (else SenderLeft, nothing written: they may have been removed meanwhile). Committed on return, unless the caller holds a
    transaction. PostgreSQL: one statement; SQLite: three in one transaction."""
    if _postgres():
        until = _moment(timezone.now() + timedelta(seconds=settings.QORVEN_TURN_LEASE))
        message = message_append(
            session=session, role=Message.Role.ASSISTANT, content=content, channel=channel, sender_name=sender_name,
            metadata=metadata, answering=Answering(message=answers, owner=owner, lease_until=until, member=member),
        ).message
        answers.answer_state = Message.Answer.ANSWERED
        return message
    with transaction.atomic():
        # The lease (and membership) first: LeaseLost or SenderLeft writes nothing.
        turn_answer_record(message=answers, owner=owner, member=member)
        return message_append(
            session=session, role=Message.Role.ASSISTANT, content=content, channel=channel, sender_name=sender_name,
            metadata=metadata,
        ).message


# The session's id while it is active with nothing a turn could answer now (compiled once).
_done: PreparedRead[Session] = PreparedRead(
    lambda tenant_id, session_id: Session.objects.filter(tenant_id=tenant_id, pk=session_id,
                                                         state=Session.State.ACTIVE)
    .filter(~Exists(answerable(Message.objects.filter(session_id=OuterRef("pk"))))).only("pk")[:1],
    tenant_id=int, session_id=int,
)


def turn_lease_end(*, tenant_id: int, session_id: int, owner: str) -> bool:
    """What a turn asks after each answer: let go of the session if it is still active
    with nothing a turn could answer now, in one statement. True when let go. False when
    a message waits (stored meanwhile: the turn answers it too), the session was rotated
    (the turn follows it) or the lease is no longer `owner`'s.

    Asking and letting go in one statement leaves no moment in which a message can be
    stored unseen while the session is still held: its own task would find the session
    busy and leave it to a later try. A message stored before the statement is seen by
    it; one stored after finds the session free (on PostgreSQL its task's take of the
    lease waits for this statement's row lock, then sees the lease gone)."""
    select, params = _done.statement(tenant_id=tenant_id, session_id=session_id)
    return _write(
        "UPDATE sessions_app_session SET turn_owner = '', turn_lease_until = NULL"
        f" WHERE turn_owner = %s AND id IN ({select})",
        [owner, *params],
    ) == 1


def message_slot_ticket_note(*, message: Message, ticket: str, queue: list[Any] | None) -> None:
    """Note on `message`, waiting for a slot of its capped model route, the ticket it
    waits as and the queue its place is in (`queue`: the server's queue name and cap;
    qorven.agent.slot_places). A compaction carries the note with the message's copy,
    which so keeps its place in the route's queue; a message without one never waited,
    and has no place to give up. One statement, setting those keys alone: it is written
    as the turn ends to come back, when a slot freed may already send it again."""
    if _postgres():
        sql = ("UPDATE sessions_app_message SET metadata = metadata"
               " || jsonb_build_object('slot_ticket', %s::text, 'slot_queue', %s::jsonb) WHERE id = %s")
    else:
        sql = ("UPDATE sessions_app_message SET metadata = json_set(metadata, '$.slot_ticket', %s,"
               " '$.slot_queue', json(%s)) WHERE id = %s")
    _write(sql, [ticket, json.dumps(queue), message.pk])
    message.metadata = {**message.metadata, "slot_ticket": ticket, "slot_queue": queue}
