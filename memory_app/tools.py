"""Memory tools for the agent: search and remember."""
from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from django.utils import timezone

from tenancy.errors import NotFound
from tenancy.tool_registry import ToolContext, ToolError, tool
from tenancy.trust import Trust
from tenancy.zones import person_zone

from .models import Memory
from .reminders import DueError, due_parse
from .person_memories import MemoryMissing, NotReplaceable, memory_forget, memory_remember
from .selectors import memories_related, memory_search, skill_get, skills_for

# A due time this far back is still taken (it comes due at once): "today" at 09:00 said
# in the afternoon. Further back it is refused, as a date worked out wrong.
DUE_PAST_TOLERANCE = timedelta(days=1)


@tool(
    name="memory_search",
    description=(
        "Search the long-term memory you keep about this user (facts, lessons, reminders, digests). Each result "
        "has its id and the date it was last said (a reminder also when it is due and whether it was done): "
        "where two disagree, the newer holds."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        "required": ["query"],
    },
    min_trust=Trust.PAIRED,
)
def memory_search_tool(ctx: ToolContext, args: dict) -> dict:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("query must be a non-empty string")
    limit = args.get("limit", 5)
    if not isinstance(limit, int) or not 1 <= limit <= 20:
        raise ToolError("limit must be an integer from 1 to 20")
    found = memory_search(tenant=ctx.tenant, qor=ctx.qor, user=ctx.user, query=query, limit=limit)
    zone = person_zone(tenant=ctx.tenant, user_id=ctx.user.pk if ctx.user else None)
    return {
        "results": [
            {"id": m.pk, "type": m.type, "date": _date(m, zone), "content": m.content,
             "created_at": m.created_at.isoformat(), "channels": m.channels, **_reminder_state(m, zone)}
            for m in found
        ]
    }


def _date(memory: Memory, zone: ZoneInfo) -> str:
    """The day the person last said what the memory holds, in their timezone, as the
    prompt's memories are dated (qorven.agent.retrieval)."""
    return memory.said_at.astimezone(zone).date().isoformat()


def _reminder_state(memory: Memory, zone: ZoneInfo) -> dict[str, object]:
    if memory.type != Memory.Type.REMINDER or memory.period_start is None:
        return {}
    done = memory.period_end is not None and memory.period_end <= timezone.now()
    return {"due": memory.period_start.astimezone(zone).isoformat(timespec="minutes"), "done": done}


# At most this many of the person's notes that look related come back with a new one.
RELATED_SHOWN = 3
# At most this many memories one note replaces.
REPLACES_MAX = 10


@tool(
    name="remember",
    description=(
        "Save a fact about the user, a lesson learned or a reminder to long-term memory, for future "
        "conversations. For a reminder, give `due`: once that time has come, the reminder is sent to the "
        "user (within a few minutes, on the channel you are talking on), once. Facts change: when the note "
        "corrects or updates memories you keep (they moved, changed their mind, a task is done), give their "
        "numbers in `replaces` and they are deleted as this one is saved. The answer lists the user's notes "
        "that look related, with their numbers and dates: if the new note contradicts one of them, call "
        "remember again with the same content and `replaces`."
    ),
    parameters={
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "the note, one self-contained sentence"},
            "type": {"type": "string", "enum": ["fact", "lesson", "reminder"]},
            "due": {
                "type": "string",
                "description": (
                    "reminders only: when to remind the user, as an ISO 8601 date-time (2026-03-14T15:30, "
                    "local time as current_time gives it, unless it has an offset such as +01:00) or date "
                    "(2026-03-14, meaning 09:00 local time); work relative times ('tomorrow') out first"
                ),
            },
            "replaces": {
                "type": "array",
                "items": {"type": "integer"},
                "maxItems": REPLACES_MAX,
                "description": (
                    "the numbers (ids) of this user's memories that this note corrects or makes out of date, "
                    "from the memories in your prompt, memory_search or remember's related notes; they are "
                    "deleted. Only when the new note really supersedes them"
                ),
            },
        },
        "required": ["content"],
    },
    min_trust=Trust.PAIRED,
)
def remember_tool(ctx: ToolContext, args: dict) -> dict:
    content = args.get("content")
    kind = args.get("type", Memory.Type.FACT)
    due_text = args.get("due")
    if isinstance(due_text, str) and not due_text.strip():
        due_text = None  # an optional argument sent empty: not a due time
    if not isinstance(content, str) or not content.strip():
        raise ToolError("content must be a non-empty string")
    if kind not in (Memory.Type.FACT, Memory.Type.LESSON, Memory.Type.REMINDER):
        raise ToolError("type must be one of: fact, lesson, reminder")
    if due_text is not None and kind != Memory.Type.REMINDER:
        raise ToolError(f"due is only for reminders; save this with type reminder, or without due as a {kind}")
    replaces = _replaces(args.get("replaces"))
    if ctx.user is None:
        raise ToolError("there is no known user to remember this for")
    zone = person_zone(tenant=ctx.tenant, user_id=ctx.user.pk)
    due = None if due_text is None else _due(due_text, zone)
    try:
        done = memory_remember(
            tenant=ctx.tenant, qor=ctx.qor, user=ctx.user, type=kind, content=content, replaces=replaces, due=due,
            channels=[ctx.channel], source_session_id=ctx.session_id,
        )
    except MemoryMissing as exc:
        raise ToolError(f"this user has no memory {exc.memory_id}; search with memory_search for its id") from None
    except NotReplaceable as exc:
        raise ToolError(f"{exc}: it records a conversation, and a note does not replace it; "
                        "leave it out of replaces") from None
    memory = done.memory
    related = memories_related(tenant=ctx.tenant, qor=ctx.qor, user=ctx.user, content=memory.content,
                               exclude={memory.pk}, limit=RELATED_SHOWN)
    result: dict[str, object] = {"saved": done.created, "already_known": not done.created, "id": memory.pk}
    if due is not None:
        result["due"] = due.astimezone(zone).isoformat(timespec="minutes")
    result["replaced"] = done.replaced
    result["related"] = [
        {"id": m.pk, "type": m.type, "date": _date(m, zone), "content": m.content, **_reminder_state(m, zone)}
        for m in related
    ]
    if related:
        result["hint"] = ("if the new note contradicts or updates any of these, call remember again with the "
                          "same content and replaces: [their ids]; otherwise leave them")
    return result


def _replaces(value: object) -> list[int]:
    if value is None:
        return []
    if (not isinstance(value, list) or len(value) > REPLACES_MAX
            or any(isinstance(v, bool) or not isinstance(v, int) for v in value)):
        raise ToolError(f"replaces must be a list of memory ids (integers), at most {REPLACES_MAX}")
    return value


def _due(text: str, zone: ZoneInfo) -> datetime:
    try:
        due = due_parse(text, zone=zone)
    except DueError as exc:
        raise ToolError(str(exc)) from None
    now = timezone.now()
    if due < now - DUE_PAST_TOLERANCE:
        # Usually a wrong year or a relative date worked out from the wrong day.
        raise ToolError(
            f"due {due.astimezone(zone).isoformat(timespec='minutes')} is in the past: it is now "
            f"{now.astimezone(zone).isoformat(timespec='minutes')} ({zone.key}); give a time still to come"
        )
    return due


@tool(
    name="forget_memory",
    description=(
        "Delete one memory you keep about this user, when they ask you to forget something. "
        "Find it first with memory_search (each result has an id); delete only what they asked to forget."
    ),
    parameters={
        "type": "object",
        "properties": {"id": {"type": "integer", "description": "the memory's id, from memory_search"}},
        "required": ["id"],
    },
    min_trust=Trust.PAIRED,
)
def forget_memory_tool(ctx: ToolContext, args: dict) -> dict:
    memory_id = args.get("id")
    if isinstance(memory_id, bool) or not isinstance(memory_id, int):
        raise ToolError("id must be an integer: a memory's id from memory_search")
    if ctx.user is None:
        raise ToolError("there is no known user whose memory this could be")
    try:
        memory = memory_forget(tenant=ctx.tenant, qor=ctx.qor, user=ctx.user, memory_id=memory_id)
    except NotFound:
        raise ToolError(f"this user has no memory {memory_id}; search with memory_search for its id") from None
    return {"forgotten": memory_id, "type": memory.type}


@tool(
    name="read_skill",
    description=(
        "Read the step-by-step instructions of one of the skills listed under 'Skills you have learned', "
        "before using it."
    ),
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "the skill's name, as listed"}},
        "required": ["name"],
    },
    min_trust=Trust.PUBLIC,  # each skill carries its own minimum trust, checked here
)
def read_skill_tool(ctx: ToolContext, args: dict) -> dict:
    name = args.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolError("name must be a non-empty string")
    skill = skill_get(tenant=ctx.tenant, trust=ctx.trust, name=name.strip())
    if skill is None:
        available = ", ".join(s.name for s in skills_for(tenant=ctx.tenant, trust=ctx.trust)) or "none"
        raise ToolError(f"no skill named {name!r} is available here; available: {available}")
    return {"name": skill.name, "description": skill.description, "instructions": skill.body}


@tool(
    name="new_topic",
    description=(
        "Start a fresh conversation because the user has clearly moved on to a new subject. After your answer, "
        "this conversation's key points are saved to memory and the user's next message starts a fresh "
        "conversation (as their /compact command does). Not for a passing remark; answer the message as usual."
    ),
    parameters={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "the new subject, in a few words"}},
    },
    min_trust=Trust.TRUSTED,
)
def new_topic_tool(ctx: ToolContext, args: dict) -> dict:
    from django.core.cache import cache
    from django.db import transaction

    from sessions_app.models import Session

    from .slash_commands import ROTATABLE
    from .compact_requests import compact_request_pending, compact_request_record
    from .tasks import session_compact

    session = Session.objects.filter(tenant=ctx.tenant, pk=ctx.session_id).only("kind", "state").first()
    if session is None or session.kind not in ROTATABLE or session.state != Session.State.ACTIVE:
        raise ToolError("only a direct chat can start a new topic; this conversation stays as it is")
    try:
        first = cache.add(f"qorven:new-topic:{session.pk}", 1, timeout=60)
    except Exception:  # whichever backend: with the cache away (Redis down), the /compact recorded says it
        first = not compact_request_pending(tenant_id=ctx.tenant.pk, session_id=session.pk)
    if not first:
        return {"status": "already starting fresh after this answer"}
    tenant_id, session_id, channel = ctx.tenant.pk, session.pk, ctx.channel
    # The compaction waits for this turn to let go of the session (session_compact retries
    # while it is held), so the answer is written here first.
    compact_request_record(tenant_id=tenant_id, session_id=session_id, channel=channel)
    transaction.on_commit(lambda: session_compact.delay(tenant_id, session_id, channel))
    return {"status": "after your answer, this conversation's key points are saved to memory and the next "
                      "message starts a fresh conversation; now answer the user's message"}
