"""Slash commands of memory: `/compact`."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import transaction

from sessions_app.models import Session
from sessions_app.turn_writes import turn_lease_acquire
from tenancy.slash_registry import CommandContext, slash_command

ROTATABLE = (Session.Kind.CANONICAL, Session.Kind.LEGACY)


@slash_command("compact", "save this conversation's key points to memory and continue in a fresh one")
def compact_command(ctx: CommandContext) -> str:
    # The summarizer calls a model, so it runs as a task, never inside the request.
    from .compact_requests import compact_request_record
    from .tasks import session_compact

    if ctx.session.kind not in ROTATABLE:
        return "Only a direct chat can be compacted; this conversation stays as it is."
    tenant_id, session_id, channel = ctx.session.tenant_id, ctx.session.pk, ctx.channel
    # Hold the session for the compaction now, so a message sent right after /compact is
    # answered after it, in the fresh session. (If a turn is running, the compaction waits
    # for it.)
    owner = f"compact-{uuid.uuid4().hex}"
    turn_lease_acquire(session_id=session_id, owner=owner, seconds=settings.QORVEN_TURN_LEASE)
    # Recorded with the task, so one lost with its worker is found and finished (channels_app.sweep).
    compact_request_record(tenant_id=tenant_id, session_id=session_id, channel=channel)
    transaction.on_commit(lambda: session_compact.delay(tenant_id, session_id, channel, owner))
    return "Compacting this conversation: saving its key points to memory first…"
