"""What a Qor remembers about a person, as that person sees and manages it.

The person lists their own memories (`/memories`, the API, the chat page) and has one
forgotten (`/forget`, the `forget_memory` tool, the API). Both are scoped to (tenant, Qor,
user) like memory search: a memory of someone else is not found, the same as one that
does not exist.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from sessions_app.models import Message
from tenancy.errors import NotFound
from tenancy.models import Qor, Tenant

from .models import Memory
from .services import memory_add, memory_delete, memory_said_again, reminder_add

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


class MemoryMissing(NotFound):
    """One of the memories named is not the person's (or not there): `memory_id`."""

    def __init__(self, memory_id: int) -> None:
        super().__init__("no such memory")
        self.memory_id = memory_id


class NotReplaceable(ValueError):
    """A summary or a conversation digest: it records a stretch of conversation, and one
    corrected note does not replace it."""


class Superseded(ValueError):
    """A note drawn from what was said at some time names a memory said after that: the
    newer one holds, and the older note corrects nothing."""


# What a note may replace: what a note can be.
REPLACEABLE = (Memory.Type.FACT, Memory.Type.LESSON, Memory.Type.REMINDER)


@dataclass(frozen=True)
class Remembered:
    memory: Memory
    created: bool  # False: the person already had this note (it is `memory`)
    replaced: list[int]  # the ids of the memories it replaced, now deleted


@transaction.atomic
def memory_forget(*, tenant: Tenant, qor: Qor, user: User, memory_id: int) -> Memory:
    """Delete one of the person's memories (with its search index entry, words included);
    returns it as it was. NotFound for a memory that is not theirs or not there."""
    (memory,) = _own_locked(tenant=tenant, qor=qor, user=user, ids=[memory_id])
    memory_delete(memories=[memory])
    _traces_redact(tenant=tenant, qor=qor, memory=memory)
    return memory


@transaction.atomic
def memory_remember(
    *, tenant: Tenant, qor: Qor, user: User, type: str, content: str, replaces: Iterable[int] = (),
    due: datetime | None = None, channels: Iterable[str] = (), source_session_id: int | None = None,
    said_at: datetime | None = None,
) -> Remembered:
    """Store the person's note (a reminder coming due at `due`, when given) in place of
    their memories `replaces` names, all at once: the ones it corrects are deleted, and
    their text leaves what conversations kept of them, as a forgotten memory's does
    (a corrected note is still the person's data, and the model must not read it again
    as current). `said_at`: when the person said it, for a note drawn from a conversation
    later (the memory flush); a fact or lesson is dated then, not when stored. MemoryMissing
    for an id that is not the person's own with this Qor (another person's, Qor's or
    tenant's, or none): nothing is stored then. NotReplaceable for a summary or a digest;
    Superseded for a memory said after `said_at`."""
    old = _own_locked(tenant=tenant, qor=qor, user=user, ids=replaces)
    for memory in old:
        if memory.type not in REPLACEABLE:
            raise NotReplaceable(f"memory {memory.pk} is a {memory_kind(memory)}")
        if said_at is not None and memory.said_at > said_at:
            raise Superseded(f"memory {memory.pk} was said after this")
    common = dict(tenant=tenant, qor=qor, user=user, content=content, channels=channels,
                  source_session_id=source_session_id)
    if due is not None:
        memory, created = reminder_add(due=due, **common)  # type: ignore[arg-type]
    elif said_at is not None and type != Memory.Type.REMINDER:  # a reminder's period is its due time
        memory, created = memory_add(type=type, period_start=said_at, period_end=said_at,  # type: ignore[arg-type]
                                     **common)
    else:
        memory, created = memory_add(type=type, **common)  # type: ignore[arg-type]
    gone = [m for m in old if m.pk != memory.pk]  # the same note said again replaces others, not itself
    memory_delete(memories=gone)
    for replaced in gone:
        _traces_redact(tenant=tenant, qor=qor, memory=replaced, replaced_by=memory.pk)
    return Remembered(memory=memory, created=created, replaced=[m.pk for m in gone])


@transaction.atomic
def memory_known_again(*, tenant: Tenant, qor: Qor, user: User, memory_id: int, at: datetime) -> Memory:
    """One of the person's notes said again at `at`, in whatever words (the memory flush
    found it already kept): dated then, when that is later than it was last said.
    MemoryMissing when it is not theirs or not there (forgotten meanwhile)."""
    (memory,) = _own_locked(tenant=tenant, qor=qor, user=user, ids=[memory_id])
    return memory_said_again(memory=memory, at=at)


def _own_locked(*, tenant: Tenant, qor: Qor, user: User, ids: Iterable[int]) -> list[Memory]:
    """The person's memories with these ids, locked (in id order); MemoryMissing naming
    the first id that is not one of them."""
    wanted = sorted(set(ids))
    for memory_id in wanted:
        if not 0 < memory_id < 2**63:  # beyond any id: not found, never a database error
            raise MemoryMissing(memory_id)
    if not wanted:
        return []
    found = {m.pk: m for m in Memory.objects.select_for_update()
             .filter(tenant=tenant, qor=qor, user=user, pk__in=wanted).order_by("pk")}
    for memory_id in wanted:
        if memory_id not in found:
            raise MemoryMissing(memory_id)
    return [found[memory_id] for memory_id in wanted]


# The tools whose stored results list memories, and the key of that list.
_LISTING_TOOLS = {"memory_search": "results", "remember": "related"}


def _traces_redact(*, tenant: Tenant, qor: Qor, memory: Memory, replaced_by: int | None = None) -> None:
    """Take a forgotten (or replaced) memory's text out of what conversations kept of it:
    the /memories lists that showed it (read again on the chat page, in /history, in an
    export) and the memory_search results and `remember`'s related notes that gave it to
    the model, which it would otherwise go on reading while they stay in its window. What
    was said in the conversation itself stays (/clear is for that). A memory's id is
    unique, and only its person's lists and searches can hold it, so its id is what finds
    them (in groups too, where the sender's search ran). Updated rows move their revision
    on, so a window a worker holds is read afresh."""
    since = Message.objects.filter(session__tenant=tenant, session__qor=qor, created_at__gte=memory.created_at)
    listings = since.filter(role=Message.Role.ASSISTANT, metadata__notice="command", metadata__command="memories",
                            content__contains=f"#{memory.pk} · ")
    line = re.compile(rf"^(• #{memory.pk}) · .*$", flags=re.MULTILINE)
    mark = "forgotten" if replaced_by is None else f"replaced by #{replaced_by}"
    for message in listings.only("pk", "content"):
        message.content = line.sub(rf"\1 · {mark}", message.content)
        message.save(update_fields=["content"])
    entry: dict[str, object] = ({"id": memory.pk, "forgotten": True} if replaced_by is None
                                else {"id": memory.pk, "replaced_by": replaced_by})
    for tool, key in _LISTING_TOOLS.items():
        results = since.filter(role=Message.Role.TOOL, metadata__tool=tool, content__contains=f'"id": {memory.pk},')
        for message in results.only("pk", "content"):
            redacted = _listing_redacted(message.content, key, entry)
            if redacted is not None:
                message.content = redacted
                message.save(update_fields=["content"])


def _listing_redacted(content: str, key: str, entry: dict[str, object]) -> str | None:
    """A tool result whose list under `key` holds the memory `entry` names, with `entry`
    in place of it (its text gone), or None when it is not a result that holds it."""
    try:
        result = json.loads(content)
    except json.JSONDecodeError:
        return None
    found = result.get(key) if isinstance(result, dict) else None
    if not isinstance(found, list) or not any(isinstance(r, dict) and r.get("id") == entry["id"] for r in found):
        return None
    result[key] = [entry if isinstance(r, dict) and r.get("id") == entry["id"] else r for r in found]
    return json.dumps(result, ensure_ascii=False)


def memory_json(memory: Memory) -> dict[str, object]:
    """A memory as the API and the chat page give it to its person."""
    return {
        "id": memory.pk,
        "type": memory.type,
        "content": memory.content,
        "channels": memory.channels,
        "created_at": memory.created_at.isoformat(),
        "said_at": memory.said_at.isoformat(),  # when what it holds was last said (Memory.said_at)
        # a reminder's due time; the stretch of conversation a digest covers
        "period_start": memory.period_start.isoformat() if memory.period_start else None,
        "period_end": memory.period_end.isoformat() if memory.period_end else None,
    }


def memory_page_json(page: MemoryPage) -> dict[str, object]:
    return {"memories": [memory_json(m) for m in page.memories], "total": page.total, "more": page.more}


def memory_kind(memory: Memory) -> str:
    return memory.type.replace("_", " ")


def memory_line(memory: Memory, *, zone: tzinfo, width: int = 160, now: datetime | None = None) -> str:
    """One memory as a line of a list: its number, kind, date (in `zone`), for a reminder
    when it is due and whether it was done (reached the person by `now`), and text (cut
    at `width`)."""
    text = " ".join(memory.content.split())
    if len(text) > width:
        text = text[: width - 1].rstrip() + "…"
    head = f"#{memory.pk} · {memory_kind(memory)} · {memory.said_at.astimezone(zone):%d %b %Y}"
    if memory.type == Memory.Type.REMINDER and memory.period_start is not None:
        done = memory.period_end is not None and memory.period_end <= (now or timezone.now())
        head += f" · due {memory.period_start.astimezone(zone):%d %b %Y %H:%M}{', done' if done else ''}"
    return f"{head} — {text}"
