"""Voice call transcripts: each call is a `voice` session of its own (SPEC §2), stored as
it was spoken and then condensed into a `conversation_digest` memory of the person who
was on the call, which later turns find through memory. The summarizer runs in a task
(memory_app.tasks.voice_digest), never in the request that posted the transcript."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction

from sessions_app.channel_kinds import Channel
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Qor, Tenant

MAX_TURNS = 2_000
MAX_TURN_CHARS = 20_000


@dataclass(frozen=True)
class SpokenTurn:
    speaker: str  # as the transcript names them
    text: str
    at: datetime | None = None
    qor: bool = False  # spoken by the Qor (a voice agent's own lines)


@dataclass(frozen=True)
class StoredCall:
    session: Session
    stored: int  # turns stored now (0: the call was posted before)


@transaction.atomic
def voice_transcript_store(
    *, tenant: Tenant, qor: Qor, user: User, call_id: str, turns: list[SpokenTurn]
) -> StoredCall:
    """Store a call's turns in its own voice session, each once (posting the same call
    again stores nothing), and queue its digest. `user` is the person on the call."""
    from .tasks import voice_digest

    scope = f"voice:user:{user.pk}"
    earlier = Message.objects.filter(tenant=tenant, external_scope=scope, external_id=f"{call_id}:0").exclude(
        external_id="").select_related("session").order_by().first()
    # The call's turns are unique per person in the workspace (the scope), whichever Qor
    # they were posted to: posted again, even to another Qor, it is the call stored then
    # (a new session there would stay empty, its digest queued for nothing).
    if earlier is not None:
        return StoredCall(earlier.session, 0)
    session = session_resolve(tenant=tenant, qor=qor, channel=Channel.VOICE, user=user, thread_id=call_id)
    stored = 0
    for i, turn in enumerate(turns):
        result = message_append(
            session=session, role=Message.Role.ASSISTANT if turn.qor else Message.Role.USER, content=turn.text,
            channel=Channel.VOICE, sender_name=turn.speaker, created_at=turn.at, external_scope=scope,
            external_id=f"{call_id}:{i}", metadata={"call": call_id}, notify=False,
        )
        stored += int(result.created)
    tenant_id, session_id = tenant.pk, session.pk
    transaction.on_commit(lambda: voice_digest.delay(tenant_id, session_id))
    return StoredCall(session, stored)


def voice_digests_resume(*, tenant: Tenant) -> int:
    """Queue the digest of every call of `tenant` still waiting for it (an active voice
    session): those whose task came while the host had the workspace suspended, called
    when it is resumed. Returns how many; a call digested meanwhile is skipped by its task."""
    from .tasks import voice_digest

    waiting = list(Session.objects.filter(tenant=tenant, kind=Session.Kind.VOICE, state=Session.State.ACTIVE)
                   .values_list("pk", flat=True))
    tenant_id = tenant.pk
    for session_id in waiting:
        transaction.on_commit(lambda session_id=session_id: voice_digest.delay(tenant_id, session_id))
    return len(waiting)


def on_tenant_suspension_changed(sender, tenant: Tenant, **kwargs) -> None:
    """Signal receiver (tenancy.signals.tenant_suspension_changed): a workspace resumed
    gets the digests its calls waited for."""
    if tenant.suspended_at is None:
        voice_digests_resume(tenant=tenant)
