"""Writes to the conversation store: resolve the session for a message, append to it.

The heart of "one conversation across every surface": chat-family channels share the one
active canonical session of (tenant, qor, user); email, sms, groups, voice and cron keep
their own session per external thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models import F
from django.db.models.base import ModelState
from django.db.models.functions import Coalesce
from django.utils import timezone

from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.storable_text import storable, storable_json
from tenancy.models import Qor, Tenant

from .append_statement import append_execute, reply_execute
from .attachments import images_copy
from .channel_kinds import CHAT_FAMILY, OWN_SESSION_CHANNELS, PLATFORM_CHANNELS
from .context_reads import FAILED_ROUND
from .errors import SessionClosed
from .models import Message, Session
from .selectors import rounds_of
from .signals import answers_dropped, message_appended
from .thread_moves import group_thread_moved


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


def session_resolve(
    *,
    tenant: Tenant,
    qor: Qor,
    channel: str,
    user: User | None = None,
    thread_id: str = "",
    sender_id: str = "",
    group: bool = False,
) -> Session:
    """Return the active session a message on `channel` belongs to, creating it on first use.

    - `group=True` (Telegram groups and their forum topics, Slack channels, Discord
      servers): one session per (channel, thread_id), for everyone in it.
    - email, sms, voice, cron: one session per (channel, thread_id) and person: another
      member naming the same thread (replying to it, or guessing its id) never lands in
      someone else's session, with their messages, memories and tools.
    - chat family: the canonical session of (tenant, qor, user); with
      QORVEN_LEGACY_SESSIONS=1, one legacy session per (channel, sender) instead.
    """
    if qor.tenant_id != tenant.pk:
        raise ValueError("qor does not belong to tenant")
    if group:
        if not thread_id:
            raise ValueError("a group message needs the group's thread_id")
        return _group_session(tenant, qor, channel, thread_id)
    if channel in OWN_SESSION_CHANNELS:
        if not thread_id:
            raise ValueError(f"a {channel} message needs a thread_id")
        return _thread_session(tenant, qor, Session.Kind(channel), channel, thread_id, user=user)
    if channel not in CHAT_FAMILY:
        raise ValueError(f"unknown channel {channel!r}")
    if settings.QORVEN_LEGACY_SESSIONS:
        key = sender_id or (f"user:{user.pk}" if user is not None else "")
        if not key:
            raise ValueError("a legacy session needs a sender id or a user")
        return _thread_session(tenant, qor, Session.Kind.LEGACY, channel, key, user=user)
    if user is None:
        raise ValueError("the canonical chat needs a user")
    return _canonical_session(tenant, qor, user)


def _canonical_session(tenant: Tenant, qor: Qor, user: User) -> Session:
    found = _active_canonical.first(tenant_id=tenant.pk, qor_id=qor.pk, user_id=user.pk)
    if found is not None:
        return found
    return _create_active(dict(tenant=tenant, qor=qor, user=user, kind=Session.Kind.CANONICAL,
                               state=Session.State.ACTIVE))


# Read for every message a person sends (compiled once: qorven.runtime.prepared_read).
_active_canonical: PreparedRead[Session] = PreparedRead(
    lambda tenant_id, qor_id, user_id: Session.objects.filter(
        tenant_id=tenant_id, qor_id=qor_id, user_id=user_id, kind=Session.Kind.CANONICAL, state=Session.State.ACTIVE
    ).order_by("pk")[:1],
    tenant_id=int, qor_id=int, user_id=int,
)


def _group_session(tenant: Tenant, qor: Qor, channel: str, thread_id: str) -> Session:
    lookup: dict[str, Any] = dict(tenant=tenant, qor=qor, kind=Session.Kind.GROUP, channel=channel,
                                  external_thread_id=thread_id, state=Session.State.ACTIVE)
    session = Session.objects.filter(**lookup).first()
    if session is not None:
        return session
    # Nothing is keyed by a chat's old id once the platform moved it: a message still naming
    # it (sent before the move, taken after) goes on in the conversation under the new one.
    moved = group_thread_moved(tenant=tenant, qor=qor, channel=channel, thread=thread_id)
    if moved is not None:
        return _get_or_create_active({**lookup, "external_thread_id": moved}, defaults={"user": None})
    return _create_active(lookup, defaults={"user": None})


def _thread_session(
    tenant: Tenant, qor: Qor, kind: str, channel: str, thread_id: str, *, user: User | None
) -> Session:
    lookup: dict[str, Any] = dict(
        tenant=tenant, qor=qor, kind=kind, channel=channel, external_thread_id=thread_id, state=Session.State.ACTIVE
    )
    if kind == Session.Kind.GROUP:  # shared
        return _get_or_create_active(lookup, defaults={"user": user})
    if kind == Session.Kind.LEGACY:  # keyed by its one sender already
        session = _get_or_create_active(lookup, defaults={"user": user})
        if user is None or session.user_id in (None, user.pk):
            return session
        # The sender's account speaks for someone else now (unlinked and paired again: a
        # number given to someone new). Its chat is the first person's — their words, and
        # turns run with their memories and tools — so it is closed, kept whole, and the
        # new person's starts empty.
        session_archive(session_id=session.pk)
        return _create_active(lookup, defaults={"user": user})
    return _get_or_create_active({**lookup, "user": user})


def _get_or_create_active(lookup: dict[str, Any], defaults: dict[str, Any] | None = None) -> Session:
    session = Session.objects.filter(**lookup).first()
    if session is not None:
        return session
    return _create_active(lookup, defaults)


def _create_active(lookup: dict[str, Any], defaults: dict[str, Any] | None = None) -> Session:
    """The active session of `lookup`, just looked for and not found: created now."""
    try:
        with transaction.atomic():
            return Session.objects.create(**lookup, **(defaults or {}))
    except IntegrityError:
        # Another request created it first; the partial unique index decided the winner.
        return Session.objects.get(**lookup)


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


def session_mark_replied(*, session_id: int, through_seq: int) -> None:
    """Record that user messages up to `through_seq` are answered (never moves back). A
    turn's answer records it with its lease (sessions_app.turn_writes.turn_answer_record)."""
    Session.objects.filter(pk=session_id, replied_through_seq__lt=through_seq).update(replied_through_seq=through_seq)


def message_answer_attempted(*, message: Message) -> int:
    """Count one more try at answering the message that failed transiently; returns the
    tries so far."""
    Message.objects.filter(pk=message.pk).update(answer_attempts=Coalesce(F("answer_attempts"), 0) + 1)
    message.answer_attempts = Message.objects.filter(pk=message.pk).values_list("answer_attempts", flat=True).get()
    return message.answer_attempts or 0


def message_transcribed(*, message: Message, content: str, metadata: dict[str, Any], awaits_answer: bool) -> None:
    """A voice note was heard (or could not be): `content` becomes the message's text (the
    audio stays attached) and, with `awaits_answer`, it waits for the Qor's answer."""
    fields: dict[str, Any] = {"content": content, "metadata": metadata}
    if awaits_answer:
        fields.update(answer_state=Message.Answer.PENDING, answer_attempts=0)
    elif message.answer_state == Message.Answer.PENDING:  # waited for its transcript, to no avail
        fields.update(answer_state=None, answer_attempts=None)
    Message.objects.filter(pk=message.pk).update(**fields)
    for name, value in fields.items():
        setattr(message, name, value)


def message_answer_fail(*, message: Message, error: str, told: bool = True) -> None:
    """The message will not be answered (refused, never fits, out of tries): it stops
    waiting, so the messages after it are answered, and keeps why for the admin. Not
    `told`: no notice says so either (answers_dropped, once committed)."""
    Message.objects.filter(pk=message.pk).update(answer_state=Message.Answer.FAILED, answer_error=error[:4000])
    message.answer_state = Message.Answer.FAILED
    _rounds_mark(tenant_id=message.tenant_id, session_id=message.session_id, seqs=[message.seq], failed=True)
    session_mark_replied(session_id=message.session_id, through_seq=message.seq)
    if not told:
        _dropped_soon([message])


def _dropped_soon(messages: list[Message]) -> None:
    if messages:
        transaction.on_commit(lambda: answers_dropped.send(sender=Message, messages=messages))


def messages_retry_failed(*, session: Session) -> list[int]:
    """`/retry`: the session's failed messages wait for an answer again, with fresh tries.
    Returns their seqs."""
    failed = Message.objects.filter(session=session, answer_state=Message.Answer.FAILED)
    seqs = list(failed.order_by("seq").values_list("seq", flat=True))
    failed.update(answer_state=Message.Answer.PENDING, answer_attempts=0)
    _rounds_mark(tenant_id=session.tenant_id, session_id=session.pk, seqs=seqs, failed=False)
    return seqs


def _rounds_mark(*, tenant_id: int, session_id: int, seqs: list[int], failed: bool) -> None:
    """Mark (or, not `failed`, unmark) the tool calls and results a turn stored for the
    messages `seqs` of the session: its earlier runs' rounds, which a come-back goes on
    from. A failed message's rounds would otherwise reach later prompts without it (a
    call and its result with no question before them). A few rows after the messages."""
    if not seqs:
        return
    rounds = rounds_of(tenant_id=tenant_id, session_id=session_id, seqs=seqs)
    rounds = rounds.exclude(metadata__has_key=FAILED_ROUND) if failed else rounds.filter(
        metadata__has_key=FAILED_ROUND)
    for row in rounds.order_by("seq"):
        metadata = dict(row.metadata)
        if failed:
            metadata[FAILED_ROUND] = True
        else:
            metadata.pop(FAILED_ROUND, None)
        row.metadata = metadata
        row.save(update_fields=["metadata"])


@transaction.atomic
def reply_supersede(*, session: Session, reply_to: int) -> list[int] | None:
    """Regenerate: the answer to user message `reply_to` is set aside and the message waits
    for a new one. Only the newest message that expected an answer, once answered, and
    not yet summarised away, can be answered again. The old reply's rows stay (marked
    superseded: out of every later prompt and off the surfaces). Returns their seqs, or
    None when `reply_to` cannot be regenerated."""
    locked = Session.objects.select_for_update().filter(pk=session.pk, state=Session.State.ACTIVE).first()
    if locked is None or reply_to <= locked.compacted_through_seq:
        return None
    later = Message.objects.filter(session=session, seq__gt=reply_to, answer_state__isnull=False)
    waiting = Message.objects.filter(session=session, seq=reply_to, role=Message.Role.USER,
                                     answer_state=Message.Answer.ANSWERED)
    if later.exists() or not waiting.update(answer_state=Message.Answer.PENDING, answer_attempts=0):
        return None
    replies = list(
        Message.objects.filter(session=session, seq__gt=reply_to, metadata__reply_to=reply_to)
        .exclude(role=Message.Role.USER).exclude(metadata__has_key="superseded").order_by("seq")
    )
    for message in replies:
        message.metadata = {**message.metadata, "superseded": True}
        message.save(update_fields=["metadata"])
    return [m.seq for m in replies]


def session_archive(*, session_id: int) -> bool:
    """Close a non-canonical session (a finished cron run, an ended thread). True if it was
    active. Its messages stay; appends to it fail with SessionClosed from now on."""
    return bool(
        Session.objects.filter(pk=session_id, state=Session.State.ACTIVE)
        .exclude(kind=Session.Kind.CANONICAL)
        .update(state=Session.State.ARCHIVED, ended_at=timezone.now())
    )


def session_reopen(*, tenant: Tenant, session_id: int) -> bool:
    """Open again a cron session that a try of its run closed, for the run's next try to
    go on in (qorven.agent.heartbeat_runs). True if it is open now."""
    Session.objects.filter(tenant=tenant, pk=session_id, kind=Session.Kind.CRON,
                           state=Session.State.ARCHIVED).update(state=Session.State.ACTIVE, ended_at=None)
    return Session.objects.filter(tenant=tenant, pk=session_id, state=Session.State.ACTIVE).exists()


@dataclass(frozen=True)
class RotateResult:
    archived: Session
    session: Session  # the new active session
    carried: list[Message]  # unanswered user messages copied into it, in order


def session_rotate(
    *,
    session: Session,
    seed_summary: str = "",
    carry_unanswered: bool = False,
    compacted_through_seq: int | None = None,
    compaction_note: str | None = None,
) -> RotateResult:
    """Archive `session` and start its successor: the one active chat of the same owner
    (canonical) or thread (legacy), empty but for `seed_summary`.

    `/clear` rotates with nothing carried forward; compaction seeds the new session with
    its summary and carries the user messages still waiting for an answer (copied with
    their channel, sender, time, metadata and attachments, marked `carried_from`; the
    originals stay in the archive, which keeps every row, marked `carried_to` and no
    longer waiting: the copy is what is answered), each with the tool rounds its turn
    stored before it came back (copied after it, replying to the copy). The old
    row is locked first, so an append racing the rotation either lands before it (and is
    carried) or fails with SessionClosed and is re-resolved.
    Raises SessionClosed when `session` is no longer active.
    """
    if session.kind not in (Session.Kind.CANONICAL, Session.Kind.LEGACY):
        raise ValueError(f"a {session.kind} session is not rotated")
    with transaction.atomic():
        old = Session.objects.select_for_update().get(pk=session.pk)
        if old.state != Session.State.ACTIVE:
            raise SessionClosed(f"session {old.pk} is not active")
        pending = _unanswered(old)
        if not carry_unanswered:  # /clear: what was still waiting is not answered
            _dropped_soon(pending)
            pending = []
        old.state = Session.State.ARCHIVED
        old.ended_at = timezone.now()
        fields = ["state", "ended_at"]
        if compacted_through_seq is not None:
            old.compacted_through_seq = max(old.compacted_through_seq, compacted_through_seq)
            fields.append("compacted_through_seq")
        if compaction_note is not None:
            old.compaction_note = compaction_note
            fields.append("compaction_note")
        old.save(update_fields=fields)
        new = Session.objects.create(
            tenant_id=old.tenant_id, qor_id=old.qor_id, user_id=old.user_id, kind=old.kind,
            channel=old.channel, external_thread_id=old.external_thread_id, seed_summary=seed_summary,
        )
        # A message's tool rounds go with it: its turn came back (after a transient failure)
        # and compacted first, and goes on from them in the new session, no tool running twice.
        rounds = list(rounds_of(tenant_id=old.tenant_id, session_id=old.pk, seqs=[m.seq for m in pending]).order_by("seq")) if pending else []
        copies: dict[int, Message] = {}  # by the original's seq
        for m in sorted([*pending, *rounds], key=lambda m: m.seq):
            metadata = {**m.metadata, "carried_from": {"session": old.pk, "seq": m.seq}}
            if m.answer_state is None:  # a round: it replies to its message's copy (carried before it)
                metadata["reply_to"] = copies[m.metadata["reply_to"]].seq
            copies[m.seq] = message_append(
                session=new, role=m.role, content=m.content, channel=m.channel, sender_name=m.sender_name,
                created_at=m.created_at, tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, metadata=metadata,
                awaits_answer=m.answer_state is not None,
            ).message
        carried = [copies[m.seq] for m in pending]
        images_copy(pairs=list(zip(pending, carried)))
        for original in [*pending, *rounds]:
            # The conversation goes on with the copy (its answer replies to it, or its
            # failure is told there): the original waits for nothing any more, so the
            # archive shows no question left waiting, and history search finds the copy
            # alone (sessions_app.search).
            copy = copies[original.seq]
            Message.objects.filter(pk=original.pk).update(
                metadata={**original.metadata, "carried_to": {"session": new.pk, "seq": copy.seq}},
                answer_state=None, answer_attempts=None)
    return RotateResult(archived=old, session=new, carried=carried)


def _unanswered(session: Session) -> list[Message]:
    return list(Message.objects.filter(session=session, answer_state=Message.Answer.PENDING).order_by("seq"))


def session_compaction_advance(*, session_id: int, from_seq: int, through_seq: int, note: str) -> bool:
    """Record that messages up to `through_seq` are condensed into `note`.

    Compare-and-set: it applies only if the session is active and still compacted through
    `from_seq`, so two summarizers racing over one range store one result. True if applied.
    """
    if through_seq <= from_seq:
        raise ValueError("compaction must move forward")
    return bool(
        Session.objects.filter(pk=session_id, state=Session.State.ACTIVE, compacted_through_seq=from_seq).update(
            compacted_through_seq=through_seq, compaction_note=note
        )
    )
