"""Slash commands of the conversation store: `/clear` (alias `/reset`) and `/search`."""
from __future__ import annotations

from tenancy.slash_registry import CommandContext, CommandReply, slash_command

from .models import Session
from .search_lines import search_answer
from .services.lifecycle import session_rotate

ROTATABLE = (Session.Kind.CANONICAL, Session.Kind.LEGACY)
CLEARED = (
    "Started a fresh conversation; nothing was carried over. The previous one ({messages} messages) is "
    "archived, and what I keep in long-term memory stays."
)


@slash_command("clear", "archive this conversation and start an empty one", aliases=("reset",))
def clear_command(ctx: CommandContext) -> str | CommandReply:
    if ctx.session.kind not in ROTATABLE:
        return "Only a direct chat can be cleared; this conversation stays as it is."
    rotated = session_rotate(session=ctx.session)
    return CommandReply(CLEARED.format(messages=rotated.archived.last_seq), session=rotated.session)


@slash_command("search", "find words in our conversation, newest first (`/search words from #N`: older matches, from the Nth)")
def search_command(ctx: CommandContext) -> str:
    return search_answer(session=ctx.session, args=ctx.args, trust=ctx.trust, sender_id=ctx.sender_id)
