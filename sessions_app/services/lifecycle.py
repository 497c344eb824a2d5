"""A session's life: archived, reopened, rotated into its successor (`/clear`,
compaction), and its compaction moved forward.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from tenancy.models import Tenant

from ..attachments import images_copy
from ..errors import SessionClosed
from ..models import Message, Session
from ..selectors import rounds_of
from .answers import _dropped_soon
from .append import message_append


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
