"""Conversation tools for the agent."""
from __future__ import annotations

from tenancy.tool_registry import ToolContext, ToolError, tool
from tenancy.trust import Trust

from .channel_kinds import Channel
from .errors import SessionNotFound
from .selectors import messages_read, session_get


@tool(
    name="get_history",
    description="Recent messages of this conversation from one channel (e.g. what was said on telegram).",
    parameters={
        "type": "object",
        "properties": {
            "channel": {"type": "string", "enum": sorted(Channel.values)},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["channel"],
    },
    min_trust=Trust.PAIRED,
)
def get_history(ctx: ToolContext, args: dict) -> dict:
    channel = args.get("channel")
    if channel not in Channel.values:
        raise ToolError(f"unknown channel {channel!r}")
    limit = args.get("limit", 20)
    if not isinstance(limit, int) or not 1 <= limit <= 50:
        raise ToolError("limit must be an integer from 1 to 50")
    try:
        session = session_get(tenant=ctx.tenant, session_id=ctx.session_id)
    except SessionNotFound:
        raise ToolError("this conversation no longer exists") from None
    messages = messages_read(session=session, channel=channel, limit=limit, without_working=True)
    return {
        "messages": [
            {"seq": m.seq, "role": m.role, "sender": m.sender_name, "content": m.content,
             "created_at": m.created_at.isoformat()}
            for m in messages
            if m.role in ("user", "assistant") and m.content and not (m.metadata or {}).get("superseded")
        ]
    }
