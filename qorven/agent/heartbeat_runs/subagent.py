"""The heartbeat sub-agent: what the beat's model is told (the prompt, with the person's
recent chat and due reminders, fingerprinted to skip a run whose inputs did not change),
and the conversation with it on the heartbeat route."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User

from heartbeats_app.cron import timezone_parse
from heartbeats_app.models import Heartbeat, HeartbeatRun
from heartbeats_app.selectors import heartbeat_timezone
from qorven.llm import Completion, ModelRoute, provider_for_role
from qorven.llm.metered import Tally
from sessions_app.channel_kinds import Channel
from sessions_app.errors import WorkspaceSuspended
from sessions_app.models import Message, Session
from sessions_app.selectors import MessageRow, canonical_session_find, messages_read
from sessions_app.quoting import one_line
from sessions_app.services.append import message_append
from tenancy.selectors import tenant_serving_now
from tenancy.trust import Trust

from ..project import project_context_for
from ..prompt import user_line
from ..turn_endings import cut_short
from .resume import EarlierTry

HEARTBEAT_OK = "HEARTBEAT_OK"
CONTRACT = """\
You are running as the scheduled heartbeat "{name}", not answering a message: nobody is
waiting for a reply. Do the task below. If there is nothing worth telling {audience} right
now, answer with exactly HEARTBEAT_OK and nothing else; that answer is recorded and not
sent. Otherwise answer with the message itself, ready to be sent as it is: short, no
preamble, no mention of being a heartbeat."""
RECENT_MESSAGES = 20
RECENT_MESSAGE_CHARS = 500
BEAT_TOOLS = frozenset({"set_beat", "list_beats", "update_beat", "delete_beat"})
NOOP = re.compile(rf"[\W_]*{HEARTBEAT_OK}[\W_]*")


@dataclass
class RunContext:
    """What the beat's model is told, the fingerprint of its inputs, and the due reminders
    it has in view."""

    system: str
    fingerprint: dict[str, Any]
    reminder_ids: list[int] = field(default_factory=list)


def run_context(beat: Heartbeat, user: User | None, now: datetime) -> RunContext:
    """The system prompt of the run, and the fingerprint of its inputs (prompt, recent
    messages of the user's chat, due reminders) that decides whether it may be skipped."""
    from memory_app.reminders import reminders_due

    qor = beat.qor
    zone_name = heartbeat_timezone(beat)
    zone = timezone_parse(zone_name)
    local = now.astimezone(zone)
    audience = (user.get_full_name() or user.get_username()) if user is not None else "anyone"
    sections = [qor.system_prompt.strip()]
    project = project_context_for(qor)
    if project.strip():
        sections.append("## Project context\n" + project.strip())
    sections.append("## Heartbeat\n" + CONTRACT.format(name=beat.name, audience=audience))
    sections.append(f"It is now {local:%A %Y-%m-%d %H:%M} ({zone_name}).")

    recent: list[MessageRow] = []
    reminders = []
    if user is not None:
        chat = canonical_session_find(tenant=beat.tenant, qor=qor, user=user)
        if chat is not None:
            recent = [
                m for m in messages_read(session=chat, limit=RECENT_MESSAGES, without_working=True,
                                         without_replaced=True)
                if m.role in (Message.Role.USER, Message.Role.ASSISTANT) and not m.metadata.get("notice")
            ]
        reminders = reminders_due(tenant=beat.tenant, qor=qor, user=user, now=now)
    if reminders:
        sections.append(
            f"## Reminders that are due\n{audience} asked to be reminded of these and their time has come: "
            "remind them in your message.\n"
            + "\n".join(f"- {one_line(r.content)} (due {(r.period_start or now).astimezone(zone):%a %Y-%m-%d %H:%M})" for r in reminders)
        )
    if recent:
        # In the system prompt, each on one line: a message's line breaks would start a
        # section or a line that reads as ours; marked as a turn marks it, at paired trust.
        lines = [
            user_line(replace(m, content=one_line(m.content[:RECENT_MESSAGE_CHARS])), answering=Trust.PAIRED)
            if m.role == Message.Role.USER else f"[{m.channel}] you: {one_line(m.content[:RECENT_MESSAGE_CHARS])}"
            for m in recent
        ]
        sections.append(f"## Recent conversation with {audience}\n" + "\n".join(lines))
    fingerprint = {
        "prompt": beat.prompt,
        "recent": [(m.session_id, m.seq) for m in recent],
        "reminders": [(r.pk, r.content) for r in reminders],
    }
    return RunContext(system="\n\n".join(s for s in sections if s), fingerprint=fingerprint,
                    reminder_ids=[r.pk for r in reminders])


def converse(
    beat: Heartbeat, run: HeartbeatRun, session: Session, user: User | None, route: ModelRoute,
    context: RunContext, spent: Tally, earlier: EarlierTry | None = None,
) -> Completion | None:
    """The heartbeat sub-agent: the beat's prompt on the heartbeat route, with the tools a
    paired user could use (except managing beats), until a final answer (None when it
    still called tools as the rounds ran out: nothing to deliver). Its tool calls and
    results are stored in `session` replying to the prompt stored there; a try that goes
    on from an `earlier` one (resume.earlier_try: `session` is its session) asks with that
    try's prompt and rounds, counted against the bound, and runs none of them again; one
    whose earlier try stored the answer (and died before the run was recorded) is given
    that answer, and the model is not asked. The answer is stored replying to the prompt,
    with the due reminders it had in view (`context` is given them back on such a try).
    Raises WorkspaceSuspended when the host suspended the workspace while the model thought."""
    from qorven.llm.metered import Spend
    from tenancy.tool_registry import ToolContext, registry

    from ..loop import tool_loop
    from ..mcp import mcp_tools_offered

    qor, tag = beat.qor, {"heartbeat": beat.pk, "run": run.pk}
    provider = provider_for_role(qor, "heartbeat")
    offered = [t for t in registry.offered(tenant=beat.tenant, qor=qor, trust=Trust.PAIRED) if t.name not in BEAT_TOOLS]
    offered += mcp_tools_offered(tenant=beat.tenant, qor=qor, trust=Trust.PAIRED)  # servers open to paired surfaces
    ctx = ToolContext(tenant=beat.tenant, qor=qor, user=user, session_id=session.pk, channel=Channel.CRON,
                      trust=Trust.PAIRED)
    if earlier is None:
        stored = message_append(session=session, role=Message.Role.USER, content=beat.prompt, channel=Channel.CRON,
                                sender_name=f"heartbeat {beat.name}", metadata=tag).message
        earlier = EarlierTry(session=session, prompt=beat.prompt, prompt_seq=stored.seq)
    if earlier.answer is not None:
        stored = earlier.answer.metadata
        context.reminder_ids = [int(pk) for pk in stored.get("reminders") or []]
        return Completion(content=earlier.answer.content, model=str(stored.get("model") or ""),
                          cut_off=bool(stored.get("cut_off")), withheld=bool(stored.get("withheld")))
    messages: list[dict[str, Any]] = [{"role": "system", "content": context.system},
                                      {"role": "user", "content": earlier.prompt}, *earlier.rounds]

    def still_served(completion: Completion) -> None:
        # The host may suspend the workspace while the model thinks: from then on no tool
        # runs for the beat, the model is not asked again, and nothing is delivered.
        if not tenant_serving_now(tenant_id=beat.tenant_id):
            raise WorkspaceSuspended(session.pk)

    completion = tool_loop(
        provider=provider, messages=messages, spend=Spend(
            beat.tenant, qor, "heartbeat", tally=spent, user_id=user.pk if user else None, session_id=session.pk),
        offered=offered, ctx=ctx, session=session, channel=Channel.CRON, metadata={**tag, "reply_to": earlier.prompt_seq},
        after_call=still_served, rounds_done=earlier.rounds_done,
    )
    if completion is None:
        return None
    message_append(session=session, role=Message.Role.ASSISTANT, content=completion.content,
                   channel=Channel.CRON, sender_name=qor.name,
                   metadata={**tag, "reply_to": earlier.prompt_seq, "model": completion.model,
                             **({cut: True} if (cut := cut_short(completion)) else {}),
                             **({"reminders": context.reminder_ids} if context.reminder_ids else {})})
    return completion
