"""Conversation tools for the agent."""
from __future__ import annotations

from tenancy.tool_registry import ToolContext, ToolError, tool
from tenancy.trust import Trust

from .channel_kinds import Channel
from .errors import SessionNotFound
from .fulltext import message_terms
from .models import Session
from .search import conversation_search, hit_snippet
from .selectors import messages_read, session_get

# A search's answer stays small in the prompt: a few matches, each cut around its words.
SEARCH_HITS = 20
SEARCH_SNIPPET = 400


@tool(
    name="get_history",
    description=(
        "Messages of this conversation. With `channel` alone: the recent ones from that channel (e.g. what was "
        "said on telegram). With `query`: the messages of the whole conversation, earlier ones (before a /clear) "
        "too, that contain every word of the query, newest first, each cut around the words found (`channel` "
        "then keeps those written there). Use it to find what was said when the person asks."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 200, "description": "words to look for"},
            "channel": {"type": "string", "enum": sorted(Channel.values)},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
    },
    min_trust=Trust.PAIRED,
)
def get_history(ctx: ToolContext, args: dict) -> dict:
    channel = args.get("channel")
    query = args.get("query")
    if channel is not None and channel not in Channel.values:
        raise ToolError(f"unknown channel {channel!r}")
    if query is not None and not isinstance(query, str):
        raise ToolError("query must be a string")
    if channel is None and not query:
        raise ToolError("give a channel, a query, or both")
    limit = args.get("limit", 10 if query else 20)
    if not isinstance(limit, int) or not 1 <= limit <= 50:
        raise ToolError("limit must be an integer from 1 to 50")
    try:
        session = session_get(tenant=ctx.tenant, session_id=ctx.session_id)
    except SessionNotFound:
        raise ToolError("this conversation no longer exists") from None
    if query:
        return _searched(session, query, channel or "", min(limit, SEARCH_HITS))
    messages = messages_read(session=session, channel=channel, limit=limit, without_working=True,
                             without_replaced=True)
    return {
        "messages": [
            {"seq": m.seq, "role": m.role, "sender": m.sender_name, "content": m.content,
             "created_at": m.created_at.isoformat()}
            for m in messages
            if m.role in ("user", "assistant") and m.content
        ]
    }


def _searched(session: Session, query: str, channel: str, limit: int) -> dict:
    if len(query) > 200:
        raise ToolError("query must be at most 200 characters: a few telling words")
    terms = message_terms(query)
    if not terms:
        raise ToolError("the query has no words to look for (common words like 'the' are left out)")
    hits = conversation_search(session=session, query=query, limit=limit, channel=channel)
    # Dated, and kept apart from the conversation: what was said then, not now.
    return {
        "query": query,
        "matches": [
            {"created_at": h.created_at.isoformat(), "channel": h.channel, "role": h.role, "sender": h.sender_name,
             "earlier_conversation": not h.active, "text": hit_snippet(h.content, terms, width=SEARCH_SNIPPET)}
            for h in hits
        ],
    }
