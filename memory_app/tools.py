"""Memory tools for the agent: search and remember."""
from __future__ import annotations

from qorven.agent.tools import ToolContext, ToolError, tool
from qorven.trust import Trust

from .models import Memory
from .selectors import memory_search, skill_get, skills_for
from .services import memory_add


@tool(
    name="memory_search",
    description="Search the long-term memory you keep about this user (facts, lessons, reminders, digests).",
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
    return {
        "results": [
            {"type": m.type, "content": m.content, "created_at": m.created_at.isoformat(), "channels": m.channels}
            for m in found
        ]
    }


@tool(
    name="remember",
    description="Save a fact about the user or a lesson learned to long-term memory, for future conversations.",
    parameters={
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "the note, one self-contained sentence"},
            "type": {"type": "string", "enum": ["fact", "lesson", "reminder"]},
        },
        "required": ["content"],
    },
    min_trust=Trust.PAIRED,
)
def remember_tool(ctx: ToolContext, args: dict) -> dict:
    content = args.get("content")
    kind = args.get("type", Memory.Type.FACT)
    if not isinstance(content, str) or not content.strip():
        raise ToolError("content must be a non-empty string")
    if kind not in (Memory.Type.FACT, Memory.Type.LESSON, Memory.Type.REMINDER):
        raise ToolError("type must be one of: fact, lesson, reminder")
    if ctx.user is None:
        raise ToolError("there is no known user to remember this for")
    memory, created = memory_add(
        tenant=ctx.tenant, qor=ctx.qor, user=ctx.user, type=kind, content=content,
        channels=[ctx.channel], source_session_id=ctx.session_id,
    )
    return {"saved": created, "already_known": not created, "id": memory.pk}


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
