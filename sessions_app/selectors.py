"""Reads of the conversation store. Every entry point takes the tenant (or the session
already obtained through one) explicitly; missing and foreign rows raise the same error."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Field, JSONField, OuterRef, QuerySet, Subquery

from qorven.runtime.prepared_read import PreparedRead
from tenancy.selectors import memberships_holding
from tenancy.switches import switched_off_of
from tenancy.models import Qor, Tenant

from .errors import SessionNotFound
from .models import Image, Message, Session


def session_get(*, tenant: Tenant, session_id: int, user: User | None = None) -> Session:
    qs = Session.objects.filter(tenant=tenant, pk=session_id)
    if user is not None:
        qs = qs.filter(user=user)
    session = qs.select_related("qor").first()
    if session is None:
        raise SessionNotFound(session_id)
    return session


def rounds_of(*, tenant_id: int, session_id: int, seqs: list[int]) -> QuerySet[Message]:
    """The tool calls and results a turn (or a heartbeat run) stored for the messages
    `seqs` of the session (rows after them that reply to them: neither a notice nor an
    answer written again), which a come-back goes on from."""
    return Message.objects.filter(
        tenant_id=tenant_id, session_id=session_id, seq__gt=min(seqs), metadata__reply_to__in=seqs,
        role__in=[Message.Role.ASSISTANT, Message.Role.TOOL],
    ).exclude(metadata__has_key="notice").exclude(metadata__has_key="superseded")


def message_by_external_id(*, session: Session, scope: str, external_id: str) -> Message | None:
    """The message of `session` stored under a platform's id in its scope (a binding); None
    when there is none there. Through the (tenant, scope, external id) unique index."""
    return Message.objects.filter(tenant_id=session.tenant_id, external_scope=scope, external_id=external_id,
                                  session=session).exclude(external_id="").order_by().first()


def message_by_external_key(*, tenant_id: int, scope: str, external_id: str) -> Message | None:
    """The message of the tenant stored under `external_id` in `scope`, in whichever of its
    sessions (a heartbeat run's answer delivered to a chat cleared since); None when there
    is none. Through the (tenant, scope, external id) unique index, as the append's dedupe."""
    return (Message.objects.filter(tenant_id=tenant_id, external_scope=scope, external_id=external_id)
            .exclude(external_id="").order_by().first())


def session_for_task(*, tenant_id: int, session_id: int) -> Session | None:
    """The session a queued task names, or None when it (or its tenant) is gone: a task
    loaded by id must not fail on a row deleted since it was queued."""
    return _session_for_task.first(tenant_id=tenant_id, session_id=session_id)


# One query, compiled once (qorven.runtime.prepared_read): a turn reads all four rows.
_session_for_task: PreparedRead[Session] = PreparedRead(
    lambda tenant_id, session_id: Session.objects.filter(tenant_id=tenant_id, pk=session_id)
    .select_related("tenant", "qor", "user")[:1],
    tenant_id=int, session_id=int,
)


def canonical_session_find(*, tenant: Tenant, qor: Qor, user: User) -> Session | None:
    """The active canonical session of (tenant, qor, user), or None before the first message."""
    return Session.objects.filter(
        tenant=tenant, qor=qor, user=user, kind=Session.Kind.CANONICAL, state=Session.State.ACTIVE
    ).first()


@dataclass(frozen=True, slots=True)
class MessageRow:
    """A stored message as a reader sees it: what surfaces, summaries and commands read,
    without a model instance (building fifty of those, and the ORM query around them,
    was two thirds of a surface read). Read-only; write through the services."""

    id: int
    session_id: int
    seq: int
    role: str
    content: str
    channel: str
    sender_name: str
    created_at: datetime | None  # None where a reader does not need it (context_read)
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str
    metadata: dict[str, Any]
    answer_state: str | None = None
    revision: int | None = None  # Message.revision: the same while the row is unchanged

    @property
    def pk(self) -> int:
        return self.id


# What the readers of messages accept: a model instance (just appended, or from the
# prompt's context read) or a row from messages_read.
StoredMessage = Message | MessageRow


def sender_first_seq(*, session: Session, sender_id: str) -> int | None:
    """The seq of the first message the platform account `sender_id` wrote in `session`
    (a group chat's: where what they were there for begins); None if they wrote none."""
    if not sender_id:
        return None
    return Message.objects.filter(session=session, role=Message.Role.USER, metadata__sender_id=sender_id).order_by(
        "seq").values_list("seq", flat=True).first()


def messages_read(
    *,
    session: Session,
    channel: str | None = None,
    after_seq: int | None = None,
    before_seq: int | None = None,
    limit: int = 50,
    without_working: bool = False,
    without_replaced: bool = False,
) -> list[MessageRow]:
    """A surface's slice of a session, oldest first.

    With `after_seq`: the first `limit` messages after it (catch-up). Otherwise the newest
    `limit` messages (before `before_seq` when given, for scrolling back). With `channel`,
    only that channel's messages. `without_working`: not the Qor's tool calls and tool
    results; `without_replaced`: not the answers the person had written again
    (regenerate: kept, marked superseded). Both are filtered in the query, so `limit`
    counts what is returned. Each form is one
    range scan of a (session[, channel], seq) index, so its cost does not depend on how
    long the session is.
    """
    if limit <= 0:
        return []
    where, params = ["session_id = %s"], [session.pk]  # type: list[str], list[Any]
    if without_working:
        where.append("role <> 'tool' AND tool_calls IS NULL")
    if without_replaced:
        sql, key = metadata_has_key("superseded")
        where.append(f"NOT {sql}")
        params.append(key)
    if channel:
        where.append("channel = %s")
        params.append(channel)
    if after_seq is not None:
        where.append("seq > %s")
        params.append(after_seq)
    elif before_seq is not None:
        where.append("seq < %s")
        params.append(before_seq)
    order = "ASC" if after_seq is not None else "DESC"
    rows = message_rows_read(f"WHERE {' AND '.join(where)} ORDER BY seq {order} LIMIT %s", [*params, limit], session.pk)
    if after_seq is None:
        rows.reverse()
    return rows


def metadata_has_key(key: str) -> tuple[str, str]:
    """SQL (and its parameter) true when the message's metadata has `key`, as the ORM's
    `metadata__has_key` writes it on this database."""
    if connection.vendor == "postgresql":
        return "(metadata ? %s)", key
    return "(JSON_TYPE(metadata, %s) IS NOT NULL)", f'$."{key}"'


_ROW_FIELDS: list[Field] = [cast(Field, Message._meta.get_field(name)) for name in (
    "id", "seq", "role", "content", "channel", "sender_name", "created_at", "tool_calls", "tool_call_id", "metadata",
    "answer_state", "revision",
)]
_row_selects: dict[tuple[str, bool], tuple[str, list[tuple[int, list[Callable[..., Any]], Any]]]] = {}


def message_rows_read(tail: str, params: list[Any], session_id: int, *, dated: bool = True) -> list[MessageRow]:
    """`SELECT <the row's columns> FROM messages <tail>` as MessageRows; without `dated`,
    `created_at` is not read (None), nor converted to a datetime.

    The SELECT and each column's converters (the ones the ORM would apply: the backend's,
    then the field's own, such as JSON decoding) are worked out once per vendor; the
    columns the ORM leaves alone are taken as they come.
    """
    plan = _row_selects.get((connection.vendor, dated))
    if plan is None:
        quote = connection.ops.quote_name
        columns = ", ".join("NULL" if f.name == "created_at" and not dated else quote(f.column) for f in _ROW_FIELDS)
        converters = []
        for i, field in enumerate(_ROW_FIELDS):
            if field.name == "created_at" and not dated:
                continue
            col = field.get_col(Message._meta.db_table)
            found = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
            if isinstance(field, JSONField) and field.decoder is None and found == [field.from_db_value]:
                found = [_json_column]  # the same result without the field's checks for key lookups
            if found:
                converters.append((i, found, col))
        plan = _row_selects[(connection.vendor, dated)] = (
            f"SELECT {columns} FROM {quote(Message._meta.db_table)} ", converters
        )
    select, converters = plan
    with connection.cursor() as cursor:
        cursor.execute(select + tail, params)
        rows = cursor.fetchall()
    result = []
    for row in rows:
        if converters:
            row = list(row)
            for i, found, col in converters:
                for convert in found:
                    row[i] = convert(row[i], col, connection)
        pk, seq, role, content, channel, sender, created_at, tool_calls, tool_call_id, metadata, answer, revision = row
        result.append(MessageRow(
            pk, session_id, seq, role, content, channel, sender, created_at, tool_calls, tool_call_id, metadata,
            answer, revision,
        ))
    return result


def _json_column(value: Any, expression: Any, connection: Any) -> Any:
    """A JSON column's text as JSONField.from_db_value gives it for a plain column (text
    that is not JSON stays as it is); the empty object, most messages' metadata, at once."""
    if value.__class__ is not str:
        return value
    if value == "{}":
        return {}
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def message_image(*, session: Session, seq: int, index: int) -> Image | None:
    """The `index`-th image (0-based, in the order sent) of message `seq` of the session,
    or None (never sent, or emptied by the images beat since)."""
    # The index is the URL's, any size: past a signed 64-bit OFFSET the database refuses
    # the query itself (SQLite's "datatype mismatch"), and no message holds 2**31 files.
    if not 0 <= index < 2**31:
        return None
    return Image.objects.filter(message__session=session, message__seq=seq).order_by("id")[index:index + 1].first()


def next_pending_user_message(*, session: Session) -> Message | None:
    """The oldest user message still waiting for an answer that a turn can give now
    (commands are answered when they arrive; group chatter and failed messages wait for
    nothing; a voice note still being transcribed waits for its transcript)."""
    return _next_pending.first(session_id=session.pk)


def voice_notes_unheard(*, session: Session, seqs: list[int]) -> list[Message]:
    """Of the session's messages numbered `seqs`, the voice notes still waiting for their
    transcript."""
    return list(Message.objects.filter(session=session, seq__in=seqs, role=Message.Role.USER,
                                       metadata__voice="pending").order_by("seq"))


def last_user_message_at(*, session: Session) -> datetime | None:
    """When the person last wrote in `session` (None before their first message)."""
    return (
        Message.objects.filter(session=session, role=Message.Role.USER)
        .order_by("-seq").values_list("created_at", flat=True).first()
    )


def answer_notice(*, message: Message) -> str | None:
    """The notice of ours `message` got instead of an answer (the system message that
    replies to it with a `notice`), or None."""
    return (
        Message.objects.filter(tenant_id=message.tenant_id, session_id=message.session_id, seq__gt=message.seq,
                               role=Message.Role.SYSTEM, metadata__reply_to=message.seq, metadata__has_key="notice")
        .order_by("seq").values_list("content", flat=True).first()
    )


def pending_with_session(*, tenant_id: int, session_id: int) -> Message | None:
    """What a turn reads first: the oldest user message of the session a turn could answer
    now (as next_pending_user_message) with its session, and the session's tenant, Qor and
    user, attached, and that user's role in the tenant now (`member_role`) and the tenant's
    switched-off switches (`switched_off`: tenancy.switches.switches_seen) — one read. None
    when nothing waits, or the session is gone or another tenant's."""
    return _pending_with_session.first(tenant_id=tenant_id, session_id=session_id)


def answerable(messages: QuerySet[Message]) -> QuerySet[Message]:
    """Of `messages`, the user messages a turn could answer now (see next_pending_user_message)."""
    return messages.filter(answer_state=Message.Answer.PENDING).exclude(metadata__has_key="voice",
                                                                        metadata__voice="pending")


def pending_with_session_query(tenant_id: int, session_id: int) -> QuerySet[Message]:
    """pending_with_session's queryset, oldest first (to be cut to one), for a read that
    annotates more (qorven.agent.turns)."""
    return (answerable(Message.objects.filter(tenant_id=tenant_id, session_id=session_id))
            .select_related("session__tenant", "session__qor", "session__user")
            .annotate(member_role=Subquery(memberships_holding().filter(
                tenant_id=OuterRef("session__tenant_id"), user_id=OuterRef("session__user_id")).values("role")[:1]),
                switched_off=switched_off_of("session__tenant_id"))
            .order_by("seq"))


# Read by every turn (compiled once: qorven.runtime.prepared_read).
# With the session's person's role in its tenant now (`member_role`, None when they are
# no longer a member, or the workspace is suspended): the turn's trust is read from the
# current membership.
_pending_with_session: PreparedRead[Message] = PreparedRead(
    lambda tenant_id, session_id: pending_with_session_query(tenant_id, session_id)[:1],
    tenant_id=int, session_id=int,
)
_next_pending: PreparedRead[Message] = PreparedRead(
    lambda session_id: answerable(Message.objects.filter(session_id=session_id)).order_by("seq")[:1],
    session_id=int,
)


def awaiting_answer(*, session: Session, seq: int) -> bool:
    """Whether message `seq` of the session is a user message still waiting for its answer."""
    return Message.objects.filter(session=session, seq=seq, role=Message.Role.USER,
                                  answer_state=Message.Answer.PENDING).exists()


def session_successor(*, session: Session) -> Session | None:
    """The active session that took over from an archived one (after /clear, /compact or a
    compaction): the owner's canonical chat, or the same legacy thread. None for others."""
    if session.kind == Session.Kind.CANONICAL:
        qs = Session.objects.filter(
            tenant_id=session.tenant_id, qor_id=session.qor_id, user_id=session.user_id, kind=session.kind  # type: ignore[misc]
        )
    elif session.kind == Session.Kind.LEGACY:
        # The same person's: a sender paired again to someone else has a chat of its own.
        qs = Session.objects.filter(
            tenant_id=session.tenant_id, qor_id=session.qor_id, kind=session.kind, channel=session.channel,
            external_thread_id=session.external_thread_id, user_id=session.user_id,  # type: ignore[misc]
        )
    else:
        return None
    return qs.filter(state=Session.State.ACTIVE).exclude(pk=session.pk).select_related("qor").first()


def carried_copy(*, message: Message) -> int | None:
    """The id of the copy a rotation carried `message` into: the row its `carried_to` names
    (sessions_app.services.lifecycle.session_rotate marks the original so, and a collapse that
    renumbers the copy into the canonical chat re-points it), or None when it was not
    carried (answered, or /clear)."""
    place = (message.metadata or {}).get("carried_to")
    if not isinstance(place, dict) or not isinstance(place.get("session"), int) or not isinstance(place.get("seq"), int):
        return None
    return (Message.objects.filter(tenant_id=message.tenant_id, session_id=place["session"], seq=place["seq"])
            .values_list("pk", flat=True).first())


def sessions_of_person(
    *, tenant: Tenant, user: User, qor: Qor | None = None, after_id: int = 0, limit: int = 500
) -> list[Session]:
    """The person's own sessions in `tenant` (with `qor` only, when given), by id after
    `after_id`: their canonical chats, active and archived, and their email, sms, voice,
    cron and legacy threads. Never a group chat: that is everyone's in it."""
    qs = Session.objects.filter(tenant=tenant, user=user, pk__gt=after_id).exclude(kind=Session.Kind.GROUP)
    if qor is not None:
        qs = qs.filter(qor=qor)
    return list(qs.select_related("qor").order_by("pk")[:limit])


@dataclass(frozen=True, slots=True)
class AttachmentRow:
    id: int
    seq: int  # of the message it came with
    mime_type: str
    name: str
    size: int
    reading: str | None  # a PDF's: how reading its text went (Image.Reading), None until read
    text: str | None  # and the text read, as the model was shown it


def attachments_between(*, session: Session, after_seq: int, through_seq: int) -> list[AttachmentRow]:
    """What came attached to the session's messages after `after_seq` up to `through_seq`,
    without the data (up to QORVEN_MAX_UPLOAD each) but with a PDF's text as read (bounded:
    qorven.agent.pdf_text): by message, then in the order sent.
    A range of the (session, seq) index, so no list of ids is bound into the query."""
    rows = (Image.objects.filter(tenant_id=session.tenant_id, message__session_id=session.pk,
                                 message__seq__gt=after_seq, message__seq__lte=through_seq)
            .order_by("message__seq", "id")
            .values_list("id", "message__seq", "mime_type", "name", "size", "reading", "text"))
    return [AttachmentRow(*row) for row in rows]


def attachment_data(*, tenant: Tenant, ids: list[int]) -> dict[int, str]:
    """The base64 data of these attachments of `tenant`, by id (those gone since are missing)."""
    return dict(Image.objects.filter(tenant=tenant, pk__in=ids).values_list("id", "data"))


def conversation_counts(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: User | None = None
) -> dict[str, int]:
    """How many sessions, messages and images a scope holds (no filter = all), as
    `conversations_delete` would count them."""
    from .models import Image

    sessions = _scoped_sessions(tenant, qor, user)
    images = Image.objects.filter(message__session__in=sessions)
    if qor is None and user is None:  # tenant-wide (or everything): unattached images too
        images = Image.objects.filter(tenant=tenant) if tenant is not None else Image.objects.all()
    return {
        "sessions": sessions.count(),
        "messages": Message.objects.filter(session__in=sessions).count(),
        "images": images.count(),
    }


def _scoped_sessions(tenant: Tenant | None, qor: Qor | None, user: User | None):
    qs = Session.objects.all()
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if qor is not None:
        qs = qs.filter(qor=qor)
    if user is not None:
        qs = qs.filter(user=user)
    return qs
