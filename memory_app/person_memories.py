"""What a Qor remembers about a person, as that person sees and manages it.

The person lists their own memories (`/memories`, the API, the chat page) and has one
forgotten (`/forget`, the `forget_memory` tool, the API). Both are scoped to (tenant, Qor,
user) like memory search: a memory of someone else is not found, the same as one that
does not exist.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from sessions_app.models import Message
from tenancy.errors import NotFound
from tenancy.models import Qor, Tenant

from .models import Memory
from .services import memory_delete

PAGE = 20
PAGE_MAX = 100


@dataclass(frozen=True)
class MemoryPage:
    memories: list[Memory]
    total: int  # the person's memories with this Qor, all pages
    more: bool  # older ones follow this page


def memories_listed(*, tenant: Tenant, qor: Qor, user: User, before_id: int | None = None,
                    limit: int = PAGE) -> MemoryPage:
    """The person's memories with this Qor, newest first; `before_id` gives the page after
    the one that ended with that memory."""
    if qor.tenant_id != tenant.pk:
        raise NotFound("no such Qor")
    owned = Memory.objects.filter(tenant=tenant, qor=qor, user=user)
    page = owned if before_id is None else owned.filter(pk__lt=before_id)
    rows = list(page.order_by("-pk")[: limit + 1])
    return MemoryPage(memories=rows[:limit], total=owned.count(), more=len(rows) > limit)


@transaction.atomic
def memory_forget(*, tenant: Tenant, qor: Qor, user: User, memory_id: int) -> Memory:
    """Delete one of the person's memories (with its search index entry, words included);
    returns it as it was. NotFound for a memory that is not theirs or not there."""
    if not 0 < memory_id < 2**63:  # beyond any id: not found, never a database error
        raise NotFound("no such memory")
    memory = (Memory.objects.select_for_update()
              .filter(tenant=tenant, qor=qor, user=user, pk=memory_id).first())
    if memory is None:
        raise NotFound("no such memory")
    memory_delete(memories=[memory])
    _traces_redact(tenant=tenant, qor=qor, memory=memory)
    return memory


def _traces_redact(*, tenant: Tenant, qor: Qor, memory: Memory) -> None:
    """Take a forgotten memory's text out of what conversations kept of it: the /memories
    lists that showed it (read again on the chat page, in /history, in an export) and the
    memory_search results that gave it to the model, which it would otherwise go on reading
    while they stay in its window. What was said in the conversation itself stays (/clear
    is for that). A memory's id is unique, and only its person's lists and searches can
    hold it, so its id is what finds them (in groups too, where the sender's search ran).
    Updated rows move their revision on, so a window a worker holds is read afresh."""
    since = Message.objects.filter(session__tenant=tenant, session__qor=qor, created_at__gte=memory.created_at)
    listings = since.filter(role=Message.Role.ASSISTANT, metadata__notice="command", metadata__command="memories",
                            content__contains=f"#{memory.pk} · ")
    line = re.compile(rf"^(• #{memory.pk}) · .*$", flags=re.MULTILINE)
    for message in listings.only("pk", "content"):
        message.content = line.sub(r"\1 · forgotten", message.content)
        message.save(update_fields=["content"])
    searches = since.filter(role=Message.Role.TOOL, metadata__tool="memory_search",
                            content__contains=f'"id": {memory.pk},')
    for message in searches.only("pk", "content"):
        redacted = _search_redacted(message.content, memory.pk)
        if redacted is not None:
            message.content = redacted
            message.save(update_fields=["content"])


def _search_redacted(content: str, memory_id: int) -> str | None:
    """A memory_search result without that memory's text (its id stays, marked forgotten),
    or None when it is not a result that holds it."""
    try:
        result = json.loads(content)
    except json.JSONDecodeError:
        return None
    found = result.get("results") if isinstance(result, dict) else None
    if not isinstance(found, list) or not any(isinstance(r, dict) and r.get("id") == memory_id for r in found):
        return None
    result["results"] = [{"id": memory_id, "forgotten": True} if isinstance(r, dict) and r.get("id") == memory_id
                         else r for r in found]
    return json.dumps(result, ensure_ascii=False)


def memory_json(memory: Memory) -> dict[str, object]:
    """A memory as the API and the chat page give it to its person."""
    return {
        "id": memory.pk,
        "type": memory.type,
        "content": memory.content,
        "channels": memory.channels,
        "created_at": memory.created_at.isoformat(),
        # a reminder's due time; the stretch of conversation a digest covers
        "period_start": memory.period_start.isoformat() if memory.period_start else None,
        "period_end": memory.period_end.isoformat() if memory.period_end else None,
    }


def memory_page_json(page: MemoryPage) -> dict[str, object]:
    return {"memories": [memory_json(m) for m in page.memories], "total": page.total, "more": page.more}


def memory_kind(memory: Memory) -> str:
    return memory.type.replace("_", " ")


def memory_said_at(memory: Memory) -> datetime:
    """When the person last said what a memory holds: a note drawn from a stretch of
    conversation (the memory flush, a digest) was said by that stretch's end, however late
    it was stored; otherwise when it was stored. A reminder's period is its due time and
    delivery instead, so it is dated when stored."""
    if memory.type != Memory.Type.REMINDER and memory.period_end is not None:
        return memory.period_end
    return memory.created_at


def memory_line(memory: Memory, *, zone: tzinfo, width: int = 160, now: datetime | None = None) -> str:
    """One memory as a line of a list: its number, kind, date (in `zone`), for a reminder
    when it is due and whether it was done (reached the person by `now`), and text (cut
    at `width`)."""
    text = " ".join(memory.content.split())
    if len(text) > width:
        text = text[: width - 1].rstrip() + "…"
    head = f"#{memory.pk} · {memory_kind(memory)} · {memory_said_at(memory).astimezone(zone):%d %b %Y}"
    if memory.type == Memory.Type.REMINDER and memory.period_start is not None:
        done = memory.period_end is not None and memory.period_end <= (now or timezone.now())
        head += f" · due {memory.period_start.astimezone(zone):%d %b %Y %H:%M}{', done' if done else ''}"
    return f"{head} — {text}"
