"""The agent's own slash commands: /help, /retry, /status, /history."""
from __future__ import annotations

from datetime import tzinfo
from functools import partial

from tenancy.slash_registry import CommandContext, slash_command, slash_registry
from tenancy.zones import person_zone


@slash_command("help", "list the commands")
def _help(ctx: CommandContext) -> str:
    from memory_app.selectors import skills_for

    lines = [f"/{c.name}" + (f" (or /{', /'.join(c.aliases)})" if c.aliases else "") + f" — {c.summary}"
             for c in slash_registry.listed()]
    text = "Commands:\n" + "\n".join(lines)
    # What the skill router answers by itself on this surface (qorven.agent.router).
    routed = [f"{s.name}: {' | '.join(s.triggers)}" for s in skills_for(tenant=ctx.session.tenant, trust=ctx.trust)
              if s.triggers]
    if routed:
        text += "\n\nAnswered at once when a message is exactly:\n" + "\n".join(routed)
    return text


@slash_command("retry", "try again to answer the messages the model could not answer")
def _retry(ctx: CommandContext) -> str:
    from django.db import transaction

    from qorven.runtime.publisher import broadcast_soon
    from sessions_app.selectors import next_pending_user_message, voice_notes_unheard
    from sessions_app.services.answers import messages_retry_failed

    from .gateway import transcribe_soon, turn_enqueue

    session = ctx.session
    seqs = messages_retry_failed(session=session)
    for seq in seqs:
        event = {"type": "message.answer", "seq": seq, "answer_state": "pending"}
        transaction.on_commit(partial(broadcast_soon, session.pk, event))
    for note in voice_notes_unheard(session=session, seqs=seqs):  # never heard (a suspension came first): heard now
        transcribe_soon(note)
    if seqs:
        turn_enqueue(session=session)
        return f"Trying again to answer {len(seqs)} message{'s' if len(seqs) != 1 else ''}…"
    if next_pending_user_message(session=session) is not None:
        turn_enqueue(session=session)  # waiting out a transient failure: try now
        return "Your last message is still waiting for its answer; trying now…"
    return "No message failed, so there is nothing to try again."


@slash_command("status", "what this conversation is and which model answers")
def _status(ctx: CommandContext) -> str:
    from qorven.llm import routes_for
    from qorven.runtime.cooldowns import route_state

    session = ctx.session
    routes = routes_for(session.qor, "main")
    route = routes[0]
    model = "offline (no model configured)" if route.offline else f"{route.model} (context {route.num_ctx} tokens)"
    lines = [
        f"Qor: {session.qor.name}",
        f"Conversation: {session.kind}, {session.last_seq} messages since {session.started_at:%Y-%m-%d}",
        f"Model: {model}",
    ]
    if len(routes) > 1:  # with fallbacks: each route in order, and whether it is cooling down
        for each in routes:
            lines.append(f"  {each.label}: {each.model} — {route_state(base_url=each.base_url, model=each.model, key=each.key)}")
    lines.append(f"This surface: {ctx.channel} (trust: {ctx.trust})")
    return "\n".join(lines)


HISTORY_PAGE = 100
GROUP_HISTORY_EMPTY = "In a group I show only what was said since you first wrote in it, and there is nothing yet."
HISTORY_PAGES = 5  # a surface buried under more than 500 commands shows what those pages hold


def _conversation_line(message) -> bool:
    metadata = message.metadata or {}
    return (message.role in ("user", "assistant") and bool(message.content.strip()) and not message.tool_calls
            and not any(key in metadata for key in ("command", "notice", "superseded")))


@slash_command("history", "this surface's recent messages: /history [n]")
def _history(ctx: CommandContext) -> str:
    from sessions_app.models import Session
    from sessions_app.selectors import messages_read, sender_first_seq

    try:
        count = int(ctx.args or 10)
    except ValueError:
        count = 0
    if not 1 <= count <= 50:
        return "Usage: /history [n] — n is a number from 1 to 50."
    # A group reads the answer together, newcomers too: it shows only what the person asking
    # was there for, from their first message in the group on, never what was said before.
    group = ctx.session.kind == Session.Kind.GROUP
    since = sender_first_seq(session=ctx.session, sender_id=ctx.sender_id) if group else 0
    if since is None:  # no account named: nothing shown is the safe answer
        return GROUP_HISTORY_EMPTY
    # Only this surface's own slice, through the (session, channel) index, read back page
    # by page until `count` lines of conversation are found: commands and their answers,
    # notices and the Qor's working (the command itself, just stored, among them) don't count.
    rows: list = []
    before = None
    for _ in range(HISTORY_PAGES):
        page = messages_read(session=ctx.session, channel=ctx.channel, before_seq=before, limit=HISTORY_PAGE)
        rows = [m for m in page if m.seq >= since and _conversation_line(m)] + rows
        if len(rows) >= count or len(page) < HISTORY_PAGE or page[0].seq <= since:
            break
        before = page[0].seq
    rows = rows[-count:]
    if not rows:
        return GROUP_HISTORY_EMPTY if group else f"No {ctx.channel} messages yet."
    zone = person_zone(tenant=ctx.session.tenant, user_id=ctx.session.user_id)
    return "\n".join(_history_line(m, zone=zone) for m in rows)


HISTORY_WIDTH = 300  # characters of a message shown


def _history_line(message, *, zone: tzinfo) -> str:
    """One line a message, quoted inert: on Telegram a line break kept from a message would
    start a line that reads as the next message (or as a fence opening a code block over
    the rest), and lines that each begin with their time and writer scan best on a phone."""
    from sessions_app.quoting import inert

    text = inert(message.content)
    if len(text) > HISTORY_WIDTH:
        text = text[:HISTORY_WIDTH].rstrip() + "…"
    return f"{message.created_at.astimezone(zone):%m-%d %H:%M} {inert(message.sender_name or message.role)}: {text}"
