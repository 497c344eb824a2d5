"""Slash commands of memory: `/compact`, `/memories` and `/forget`."""
from __future__ import annotations

import re
import uuid

from django.conf import settings
from django.db import transaction

from sessions_app.models import Session
from sessions_app.turn_writes import turn_lease_acquire
from tenancy.errors import NotFound
from tenancy.slash_registry import CommandContext, slash_command
from tenancy.trust import Trust, trust_allows
from tenancy.zones import person_zone

from .person_memories import PAGE, memories_listed, memory_forget, memory_kind, memory_line

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


_NUMBER = re.compile(r"#?([0-9]{1,18})")


def _memory_number(text: str) -> int | None:
    """The memory number in `#12` or `12`, or None."""
    found = _NUMBER.fullmatch(text.strip())
    return int(found.group(1)) if found else None


def _own_memories_refusal(ctx: CommandContext) -> str | None:
    """Why this conversation may not show or change the person's memories, or None.

    Only a direct chat with a known, paired person: in a group others would read them."""
    if ctx.session.kind not in ROTATABLE or ctx.session.user is None:
        return "Your memories are shown and forgotten only in a direct chat with me."
    if not trust_allows(ctx.trust, Trust.PAIRED):
        return "Your memories are shown and forgotten only once you are paired with me."
    return None


@slash_command("memories", "what I remember about you (`/memories #N`: those older than #N)")
def memories_command(ctx: CommandContext) -> str:
    refusal = _own_memories_refusal(ctx)
    if refusal:
        return refusal
    session = ctx.session
    before = None
    if ctx.args.strip():
        before = _memory_number(ctx.args)
        if before is None:
            return "Use `/memories` for the newest, or `/memories #N` for those older than #N."
    page = memories_listed(tenant=session.tenant, qor=session.qor, user=session.user, before_id=before, limit=PAGE)
    if not page.memories:
        return ("I remember nothing about you yet." if before is None
                else "There is nothing older than that.")
    head = (f"What I remember about you ({page.total}):" if before is None
            else f"Older memories (of {page.total}):")
    zone = person_zone(tenant=session.tenant, user_id=session.user_id)
    lines = [head, *(f"• {memory_line(m, zone=zone)}" for m in page.memories)]
    if page.more:
        lines.append(f"Older ones: `/memories #{page.memories[-1].pk}`.")
    lines.append("To have me forget one: `/forget #N`.")
    return "\n".join(lines)


@slash_command("forget", "forget one of your memories: `/forget #N` (numbers from /memories)")
def forget_command(ctx: CommandContext) -> str:
    refusal = _own_memories_refusal(ctx)
    if refusal:
        return refusal
    number = _memory_number(ctx.args)
    if number is None:
        return "Say which memory: `/forget #N`, with N from `/memories`."
    session = ctx.session
    try:
        memory = memory_forget(tenant=session.tenant, qor=session.qor, user=session.user, memory_id=number)
    except NotFound:
        return f"You have no memory #{number}; `/memories` lists yours."
    # Not its text again: what is forgotten is not copied into the conversation. Dated as
    # /memories dates it: when it was last said.
    when = memory.said_at.astimezone(person_zone(tenant=session.tenant, user_id=session.user_id))
    return f"Forgotten: #{memory.pk}, a {memory_kind(memory)} from {when:%d %b %Y}."
