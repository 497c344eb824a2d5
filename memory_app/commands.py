"""Slash commands of memory: `/compact`."""
from __future__ import annotations

from django.db import transaction

from qorven.agent.commands import CommandContext, command
from sessions_app.models import Session

ROTATABLE = (Session.Kind.CANONICAL, Session.Kind.LEGACY)


@command("compact", "save this conversation's key points to memory and continue in a fresh one")
def compact_command(ctx: CommandContext) -> str:
    # The summarizer calls a model, so it runs as a task, never inside the request.
    from .tasks import session_compact

    if ctx.session.kind not in ROTATABLE:
        return "Only a direct chat can be compacted; this conversation stays as it is."
    tenant_id, session_id, channel = ctx.session.tenant_id, ctx.session.pk, ctx.channel
    transaction.on_commit(lambda: session_compact.delay(tenant_id, session_id, channel))
    return "Compacting this conversation: saving its key points to memory first…"
