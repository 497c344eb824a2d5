"""How a turn ends a message: its reply stored, a notice that the reply was cut, the
message failed with a notice of ours, or left unanswered because its sender left. Each
confirms in its transaction that the turn still holds the session."""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from qorven.llm import Completion, ModelError
from qorven.runtime.publisher import broadcast_soon
from sessions_app.errors import SenderLeft, SessionClosed, WorkspaceSuspended
from sessions_app.models import Message, Session
from sessions_app.services.answers import message_answer_fail
from sessions_app.services.append import message_append
from sessions_app.turn_writes import reply_store, turn_lease_confirm
from tenancy.selectors import membership_active, tenant_serving_now
from tenancy.trust import Trust

from .notices import notice_for

logger = logging.getLogger("qorven.agent.turns")


def answers_a_member(session: Session, pending: Message) -> bool:
    """Whether answering `pending` needs its sender to be a member of the workspace: a
    person's message, not a public surface's (a webchat's anonymous visitor has none)."""
    return session.user is not None and str(pending.metadata.get("trust") or Trust.PAIRED) != Trust.PUBLIC


def reply_end(
    session: Session, pending: Message, owner: str, content: str, *, metadata: dict[str, Any] | None = None,
    notice: str = "",
) -> Message:
    """Append the final answer (tagged with the inbound channel) and mark the message
    answered, with the confirmation that this turn still holds the session (so a turn
    that lost its lease never answers twice: sessions_app.turn_writes.reply_store), that
    the workspace is served (WorkspaceSuspended if the host suspended it while the model
    thought) and that its sender is still a member (SenderLeft if they were removed
    meanwhile): otherwise nothing is stored or sent. Then tell streaming surfaces the
    reply is complete."""
    metadata = {"reply_to": pending.seq, **(metadata or {})}
    if notice:
        metadata["notice"] = notice
    message = reply_store(session=session, answers=pending, owner=owner, content=content, channel=pending.channel,
                          sender_name=session.qor.name, metadata=metadata, member=answers_a_member(session, pending))
    # After the reply's message.new (sent as it was stored), so it follows it through the ordered
    # sender; as it is sent, the reply's stop flag is cleared (qorven.runtime.streams.stream_end).
    done = {"type": "message.done", "reply_to": pending.seq, "seq": message.seq}
    transaction.on_commit(lambda: broadcast_soon(session.pk, done))
    return message


CUT_OFF_NOTICE = "My reply hit its length limit and was cut off there. Say \"go on\" and I'll continue."
WITHHELD_NOTICE = "The model provider's content filter stopped my reply there; the rest of it was withheld."
CUT_SHORT_NOTICES = {"cut_off": CUT_OFF_NOTICE, "withheld": WITHHELD_NOTICE}  # by `cut_short`'s reason


def cut_short(completion: Completion) -> str:
    """Why the reply ends before the model's answer did ("" when it does not): "cut_off"
    (a length limit, the model's or QORVEN_MAX_REPLY_CHARS), "withheld" (the provider's
    content filter stopped it partway). The reply's metadata flag and its notice's key."""
    return "cut_off" if completion.cut_off else "withheld" if completion.withheld else ""


def cut_short_notice(session: Session, pending: Message, completion: Completion) -> None:
    """The reply was cut short: say so, in our words, on its surface (a notice: not part
    of later prompts)."""
    key = cut_short(completion)
    if not key:
        return
    text = CUT_SHORT_NOTICES[key]
    try:
        message_append(session=session, role=Message.Role.SYSTEM, content=text, channel=pending.channel,
                       metadata={"notice": key, "reply_to": pending.seq})
    except SessionClosed:
        pass  # cleared meanwhile: the person has moved on


def not_a_member_end(session: Session, pending: Message, owner: str, *, reason: str = SenderLeft.reason) -> None:
    """The sender left the workspace, or the host suspended it (`reason`: the refusal's,
    sessions_app.errors), while the message waited or the model thought: it is not
    answered (no notice: nobody there is served), and marked failed for the admin."""
    logger.info("message %s of session %s not answered: %s", pending.seq, session.pk, reason)
    with transaction.atomic():
        turn_lease_confirm(session_id=session.pk, owner=owner)
        message_answer_fail(message=pending, error=reason, told=False)
        state = {"type": "message.answer", "seq": pending.seq, "answer_state": Message.Answer.FAILED}
        transaction.on_commit(lambda: broadcast_soon(session.pk, state))


def fail_end(session: Session, pending: Message, owner: str, error: ModelError) -> Message | None:
    """The message will not be answered: mark it failed with the full error (log and
    admin), and tell its surface why in one notice of ours — unless its sender left the
    workspace meanwhile, or the host suspended it (not_a_member_end: nobody is told)."""
    logger.warning("message %s of session %s not answered (%s): %s", pending.seq, session.pk, error.kind, error.detail)
    if not tenant_serving_now(tenant_id=session.tenant_id):
        not_a_member_end(session, pending, owner, reason=WorkspaceSuspended.reason)
        return None
    person = session.user
    if person is not None and answers_a_member(session, pending) and (
            membership_active(tenant=session.tenant, user=person) is None):
        not_a_member_end(session, pending, owner)
        return None
    key, text = notice_for(error.kind, channel=pending.channel, error=error)
    with transaction.atomic():
        turn_lease_confirm(session_id=session.pk, owner=owner)
        message_answer_fail(message=pending, error=f"{type(error).__name__}: {error.detail}")
        notice = message_append(
            session=session, role=Message.Role.SYSTEM, content=text, channel=pending.channel,
            metadata={"notice": key, "reply_to": pending.seq},
        ).message
        state = {"type": "message.answer", "seq": pending.seq, "answer_state": Message.Answer.FAILED}
        done = {"type": "message.done", "reply_to": pending.seq, "seq": notice.seq}
        transaction.on_commit(lambda: broadcast_soon(session.pk, state))
        transaction.on_commit(lambda: broadcast_soon(session.pk, done))  # the stop flag cleared with it
    return notice
