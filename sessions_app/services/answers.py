"""A user message's answer: waiting, tried, failed, retried, answered again (regenerate),
and the tool rounds its turns stored marked with it.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce


from ..context_reads import FAILED_ROUND
from ..models import Message, Session
from ..selectors import rounds_of
from ..signals import answers_dropped


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
