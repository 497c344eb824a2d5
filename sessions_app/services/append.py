"""Appending a message to a session: the next seq in one statement, a platform's repeat
stored once, observers told after commit; and delivery's mark on what it is to send.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models.base import ModelState

from qorven.runtime.storable_text import storable, storable_json

from ..append_statement import append_execute, reply_execute
from ..channel_kinds import PLATFORM_CHANNELS
from ..errors import SessionClosed
from ..models import Message, Session
from ..signals import message_appended


@dataclass(frozen=True)
class Answering:
    """A reply's turn: the user message it answers, the lease's owner and its new end, and
    whether the reply is stored only while the session's person is still a member."""

    message: Message
    owner: str
    lease_until: Any  # as the database stores it
    member: bool = False


@dataclass(frozen=True)
class AppendResult:
    message: Message
    created: bool  # False when the external id was seen before: nothing was stored


def message_append(
    *,
    session: Session,
    role: str,
    content: str,
    channel: str,
    sender_name: str = "",
    external_scope: str = "",
    external_id: str = "",
    created_at: datetime | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str = "",
    metadata: dict[str, Any] | None = None,
    notify: bool = True,
    awaits_answer: bool = False,
    answering: Answering | None = None,
) -> AppendResult:
    """Append one message to `session` with the next seq.

    One statement takes the next seq from the session row and inserts the message
    (sessions_app.append_statement), under the session's row lock on PostgreSQL and
    SQLite's write lock: concurrent appends get distinct, gap-free, increasing seqs. A
    message whose (external_scope, external_id) was stored before is not stored again:
    the first one is returned with `created=False`. Observers (live surfaces,
    delivery to platforms) are told after commit, unless `notify` is False: imported
    history is stored without being broadcast or sent anywhere again. A reply or notice
    for a platform that observers are told of is stored marked `delivery_unplanned`
    until delivery has planned it (message_delivery_planned). `awaits_answer`: a
    user message the Qor is to answer; it starts `pending` (see message_answer_*).
    Raises SessionClosed if the session is archived.

    `answering` (PostgreSQL only; see sessions_app.turn_writes.reply_store): the message
    is a turn's reply, stored in the statement that confirms the turn's lease (LeaseLost)
    and, if asked, that the session's person is still a member (SenderLeft), and marks the
    message it answers.
    """
    if external_id and not external_scope:
        raise ValueError("external_id needs an external_scope (the binding or user it is unique in)")
    # A message with a platform id is not looked up first: the statement itself refuses a
    # repeat (the unique index, in a savepoint inside a caller's transaction), and a repeat
    # is rare — a platform's retry is already turned away when its webhook is stored.
    values = {
        "tenant_id": session.tenant_id,
        "session_id": session.pk,
        "role": role,
        "content": storable(content),
        "channel": channel,
        "sender_name": storable(sender_name),
        "created_at": created_at,  # None: the append statement's own time, under the session's lock
        "external_scope": external_scope,
        "external_id": external_id,
        "tool_calls": storable_json(tool_calls),
        "tool_call_id": tool_call_id,
        "metadata": storable_json(metadata or {}),
        "answer_state": Message.Answer.PENDING if awaits_answer else None,
        "answer_attempts": 0 if awaits_answer else None,
        "answer_error": None,
        # In the INSERT itself: a process dying right after the commit leaves the mark.
        "delivery_unplanned": True if notify and delivery_awaited(role, channel, tool_calls) else None,
    }
    db = connections[DEFAULT_DB_ALIAS]
    try:
        if answering is None:
            row = append_execute(db, session_id=session.pk, values=values)
        else:
            row = reply_execute(db, session_id=session.pk, values=values, owner=answering.owner,
                                lease_until=answering.lease_until, answers_id=answering.message.pk,
                                answers_seq=answering.message.seq, member=answering.member)
    except IntegrityError:
        # The same external id raced in (the unique index decided); it is stored once.
        existing = _find_external(session.tenant_id, external_scope, external_id) if external_id else None
        if existing is None:
            raise
        return AppendResult(existing, created=False)
    if row is None:
        raise SessionClosed(f"session {session.pk} is not active")
    values["id"] = int(row[0])
    seq = values["seq"] = int(row[1])
    values["created_at"] = row[2]
    message = _message_built(db.alias, values)
    _SESSION_FIELD.set_cached_value(message, session)  # observers read it without a query
    session.last_seq = seq
    if notify:
        transaction.on_commit(lambda: message_appended.send(sender=Message, message=message))
    return AppendResult(message, created=True)


_SESSION_FIELD = Message._meta.get_field("session")
_SENT_ROLES = frozenset({Message.Role.ASSISTANT, Message.Role.SYSTEM})


def delivery_awaited(role: str, channel: str, tool_calls: list[dict[str, Any]] | None) -> bool:
    """Whether delivery sends a message appended so (observers told): a reply or a notice
    of the Qor's, not a step of its tool calls, on a platform's channel."""
    return role in _SENT_ROLES and not tool_calls and channel in PLATFORM_CHANNELS


_planned_sql: dict[str, str] = {}  # by vendor


def message_delivery_planned(*, message: Message) -> None:
    """Delivery has planned `message` (its parts, or found it had nowhere to go): its mark
    goes, and the sweeper never plans it again. One statement, and none for a message not
    marked (planned before, or never awaited, or its mark cleared by the statement that
    planned it: message_delivery_planned_statement)."""
    statement = message_delivery_planned_statement(message=message)
    if statement is None:
        return
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(*statement)
    message.delivery_unplanned = None


def message_delivery_planned_statement(*, message: Message) -> tuple[str, list[Any]] | None:
    """message_delivery_planned's UPDATE and its parameters, for delivery to run as part of
    the statement that plans the parts (on PostgreSQL, a WITH of that INSERT: one round
    trip where two were); None for a message not marked. Whoever runs it sets the message's
    `delivery_unplanned` to None."""
    if not message.delivery_unplanned:
        return None
    db = connections[DEFAULT_DB_ALIAS]
    sql = _planned_sql.get(db.vendor)
    if sql is None:
        quote = db.ops.quote_name
        sql = _planned_sql[db.vendor] = (
            f"UPDATE {quote(Message._meta.db_table)} SET {quote('delivery_unplanned')} = NULL"
            f" WHERE {quote('id')} = %s AND {quote('tenant_id')} = %s")
    return sql, [message.pk, message.tenant_id]


def _message_built(alias: str, values: dict[str, Any]) -> Message:
    """The stored row as a Message, from the values just written (every concrete field's
    attname): what `Model.from_db` makes, without running `__init__`'s per-field setattr
    — a tenth of an append's time on SQLite."""
    message = Message.__new__(Message)
    message._state = ModelState()
    message._state.adding, message._state.db = False, alias
    message.__dict__.update(values)
    return message


def external_message_query(tenant_id: int, scope: str, external_id: str):
    """The dedupe lookup, shaped for the partial unique index: it restates the index's
    condition (external_id not empty) and asks for no order, so both databases search the
    index instead of scanning the table (tests/sessions_app/test_dedupe_index.py)."""
    return (Message.objects.filter(tenant_id=tenant_id, external_scope=scope, external_id=external_id)
            .exclude(external_id="").order_by()[:1])


def _find_external(tenant_id: int, scope: str, external_id: str) -> Message | None:
    return next(iter(external_message_query(tenant_id, scope, external_id)), None)
