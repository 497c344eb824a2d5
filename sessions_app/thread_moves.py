"""A group chat whose platform gave it a new id (a Telegram group upgraded to a supergroup)
keeps its conversation: its group sessions are keyed by the new id from then on, and the
move is kept (MovedThread), so a message still naming the old id — sent before the upgrade,
taken after it — joins the conversation where it is now."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from tenancy.models import Qor, Tenant

from .models import Message, MovedThread, Session


@dataclass
class ThreadMove:
    sessions: list[Session] = field(default_factory=list)  # the group's sessions, keyed by the new id now
    waiting: bool = False  # messages waiting for an answer were moved from a session started under the new id


@transaction.atomic
def group_thread_move(
    *, tenant: Tenant, qor: Qor, channel: str, old_thread: str, new_thread: str, sep: str = "|"
) -> ThreadMove:
    """The Qor's active group sessions of `channel` keyed by `old_thread` — and by
    `old_thread<sep>…` (a forum topic's) — are keyed by `new_thread` instead, keeping the
    rest of the key. Safe to run again (nothing is keyed by the old id any more) and in any
    order with messages under the new id: a session already started there (a message taken
    before the move) is folded into the group's, its messages after the group's in the
    order they came, and archived."""
    if not old_thread or not new_thread or old_thread == new_thread:
        return ThreadMove()
    MovedThread.objects.update_or_create(tenant=tenant, qor=qor, channel=channel, old_thread=old_thread,
                                         defaults={"new_thread": new_thread})
    # A chat moved before (A → B, now B → C): a message naming A goes to C.
    MovedThread.objects.filter(tenant=tenant, qor=qor, channel=channel, new_thread=old_thread).update(
        new_thread=new_thread)
    base = Session.objects.select_for_update().filter(
        tenant=tenant, qor=qor, kind=Session.Kind.GROUP, channel=channel, state=Session.State.ACTIVE)
    moving = list(base.filter(Q(external_thread_id=old_thread) | Q(external_thread_id__startswith=old_thread + sep))
                  .order_by("pk"))
    result = ThreadMove()
    for session in moving:
        key = new_thread + session.external_thread_id[len(old_thread):]
        started = base.filter(external_thread_id=key).order_by("pk").first()
        if started is not None:
            result.waiting |= _fold(into=session, source=started)
        session.external_thread_id = key
        session.save(update_fields=["external_thread_id"])
        result.sessions.append(session)
    return result


def group_thread_moved(*, tenant: Tenant, qor: Qor, channel: str, thread: str, sep: str = "|") -> str | None:
    """Where the Qor's conversation of a group `thread` (a chat, or `<chat><sep><topic>`)
    is keyed now that the platform gave its chat a new id; None when it was never moved."""
    chat, topic_sep, topic = thread.partition(sep)
    moved = MovedThread.objects.filter(tenant=tenant, qor=qor, channel=channel, old_thread=chat).values_list(
        "new_thread", flat=True).first()
    return None if moved is None else f"{moved}{topic_sep}{topic}"


def _fold(*, into: Session, source: Session) -> bool:
    """`source`'s messages appended to `into` (new seqs, their replies' `reply_to` with
    them) and `source` archived; whether any of them waits for an answer."""
    seqs: dict[int, int] = {}
    rows = list(Message.objects.filter(session=source).order_by("seq"))
    for offset, message in enumerate(rows, start=1):
        seqs[message.seq] = into.last_seq + offset
    for message in rows:
        metadata = dict(message.metadata or {})
        if metadata.get("reply_to") in seqs:
            metadata["reply_to"] = seqs[metadata["reply_to"]]
        Message.objects.filter(pk=message.pk).update(session=into, seq=seqs[message.seq], metadata=metadata)
    if rows:
        into.last_seq += len(rows)
        Session.objects.filter(pk=into.pk).update(last_seq=into.last_seq)
    Session.objects.filter(pk=source.pk).update(state=Session.State.ARCHIVED, ended_at=timezone.now())
    return any(m.answer_state == Message.Answer.PENDING for m in rows)
