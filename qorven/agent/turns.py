"""One turn: answer the oldest unanswered user message of a session.

Turns on one session run one at a time, in seq order, across processes: a turn holds the
session's lease (a row-level lease, not a process lock) and answers pending user messages
oldest first. A message that arrives meanwhile is stored and shown at once (appends never
wait for the lease) and answered by the next iteration. Running the task twice is
harmless: an answered message is never answered again.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction

from qorven.live import broadcast, broadcast_soon
from qorven.llm import Completion, ContextLengthExceeded, ModelRoute, Provider, ProviderUnavailable, Usage
from qorven.llm import provider_for, route_for
from qorven.models import Qor
from qorven.selectors import budget_exhausted
from qorven.services import usage_record
from qorven.trust import Trust
from sessions_app.errors import SessionClosed
from sessions_app.models import Message, Session
from sessions_app.selectors import next_pending_user_message, session_for_task, session_successor
from sessions_app.services import (
    message_append,
    session_mark_replied,
    turn_lease_acquire,
    turn_lease_release,
)

from .compaction import auto_compaction_point, compact_for_turn, compaction_due, fixed_tokens, summarizer_queue
from .prompt import Prompt, PromptParts, estimate_tokens, prompt_build
from .retrieval import memories_for, skills_for_prompt
from .tools import Tool, ToolContext, registry

logger = logging.getLogger(__name__)

BUDGET_NOTICE = "This workspace has used its monthly model budget, so I can't answer until it resets or is raised."
UNAVAILABLE_NOTICE = "The model is not answering right now ({reason}). Your message is saved; send /retry or a new message to try again."
ROUNDS_NOTICE = "I stopped after {rounds} rounds of tool calls without reaching an answer. Please rephrase or narrow the request."
CONTEXT_NOTICE = "This conversation no longer fits the model's context, even after trimming. Try /compact, then ask again."


class TurnBusy(Exception):
    """Another process holds the session's turn lease; try again shortly."""


@dataclass
class TurnOutcome:
    answered: int = 0
    failed: bool = False


class _Step(Enum):
    ANSWERED = "answered"  # the message got its reply (or a final notice)
    FAILED = "failed"  # a notice says why; the message stays pending
    ROTATED = "rotated"  # manual compaction moved the conversation to a fresh session
    ROTATED_ON_OVERFLOW = "rotated_on_overflow"  # the same, after a context-length error


# Called when the provider reports the prompt is too long, before the one retry (after
# manual-mode compaction, which rotates the session, had its chance). In auto mode the
# retry then uses a halved window.
ContextOverflowHook = Callable[[Session], None]
context_overflow_hooks: list[ContextOverflowHook] = []


def turn_process(*, tenant_id: int, session_id: int) -> TurnOutcome:
    """Answer every pending user message of the session, oldest first. Raises TurnBusy at
    once when another turn holds the session (the task comes back later)."""
    owner = uuid.uuid4().hex
    if not turn_lease_acquire(session_id=session_id, owner=owner, seconds=settings.QORVEN_TURN_LEASE):
        raise TurnBusy(session_id)
    outcome = TurnOutcome()
    overflowed = False
    try:
        while True:
            session = session_for_task(tenant_id=tenant_id, session_id=session_id)
            if session is None:
                break
            if session.state != Session.State.ACTIVE:
                # Rotated (/clear, /compact, manual compaction): what was still waiting for an
                # answer was carried to the successor, so the turn follows it there.
                successor = session_successor(session=session)
                if successor is None or not turn_lease_acquire(
                    session_id=successor.pk, owner=owner, seconds=settings.QORVEN_TURN_LEASE
                ):
                    break  # nothing to follow, or another turn is already on it
                turn_lease_release(session_id=session_id, owner=owner)
                session_id = successor.pk
                continue
            pending = next_pending_user_message(session=session)
            if pending is None:
                break
            try:
                step = _answer(session, pending, owner, overflowed=overflowed)
            except SessionClosed:
                continue  # cleared or rotated mid-turn: the reply has no place to go
            overflowed = step is _Step.ROTATED_ON_OVERFLOW
            if step is _Step.FAILED:
                outcome.failed = True
                break
            if step is _Step.ANSWERED:
                outcome.answered += 1
    finally:
        turn_lease_release(session_id=session_id, owner=owner)
    return outcome


def _answer(session: Session, pending: Message, owner: str, *, overflowed: bool = False) -> _Step:
    """Answer one user message. `overflowed`: the message comes fresh from a compaction
    forced by a context-length error, so its one retry is spent."""
    qor = session.qor
    channel = pending.channel
    if budget_exhausted(tenant=session.tenant):
        _reply(session, pending, BUDGET_NOTICE, notice="budget")
        return _Step.ANSWERED
    trust = str(pending.metadata.get("trust") or Trust.PAIRED)
    route = route_for(qor, "main")
    provider = provider_for(route)
    offered = [] if route.offline else registry.offered(tenant=session.tenant, qor=qor, trust=trust)
    ctx = ToolContext(
        tenant=session.tenant, qor=qor, user=session.user, session_id=session.pk, channel=channel, trust=trust
    )
    manual = qor.summarizer_mode == Qor.SummarizerMode.MANUAL
    reserve = settings.QORVEN_CONTEXT_RESERVE
    prompt = _prompt(session, qor, pending, offered, route, trust, reserve)
    if manual and not overflowed and compaction_due(
        session=session, prompt=prompt, num_ctx=route.num_ctx, threshold=qor.compact_threshold
    ):
        if compact_for_turn(session=session, pending=pending, overflow=False) is not None:
            return _Step.ROTATED
    for attempt in range(1 if overflowed else 0, 2):
        try:
            _tool_loop(session, pending, provider, route, prompt, offered, ctx, owner)
        except ContextLengthExceeded:
            if attempt == 1:
                _notice(session, pending, CONTEXT_NOTICE, notice="context_length")
                return _Step.FAILED
            logger.info("context length exceeded on session %s; compacting or shrinking, retrying once", session.pk)
            if manual and compact_for_turn(session=session, pending=pending, overflow=True) is not None:
                return _Step.ROTATED_ON_OVERFLOW
            for hook in context_overflow_hooks:
                hook(session)
            session.refresh_from_db()
            reserve = max(reserve, route.num_ctx // 2)
            prompt = _prompt(session, qor, pending, offered, route, trust, reserve)
            continue
        except ProviderUnavailable as exc:
            logger.warning("model unavailable for session %s: %s", session.pk, exc)
            _notice(session, pending, UNAVAILABLE_NOTICE.format(reason=str(exc)[:200]), notice="model_unavailable")
            return _Step.FAILED
        if not manual:
            _after_exchange(session, route, prompt, reserve)
        return _Step.ANSWERED
    return _Step.FAILED


def _after_exchange(session: Session, route: ModelRoute, prompt: Prompt, reserve: int) -> None:
    """Auto mode: once the uncompacted messages outgrow the window, queue the summarizer."""
    session.refresh_from_db(fields=["compacted_through_seq", "replied_through_seq", "last_seq"])
    budget = route.num_ctx - reserve - fixed_tokens(prompt)
    point = auto_compaction_point(session=session, budget=budget)
    if point is not None:
        summarizer_queue(session=session, through_seq=point)


def _prompt(
    session: Session, qor: Qor, pending: Message, offered: list[Tool], route: ModelRoute, trust: str, reserve: int
) -> Prompt:
    parts = PromptParts(
        system_prompt=qor.system_prompt,
        project_context=qor.project_context,
        skills=skills_for_prompt(tenant=session.tenant, trust=trust),
        memories=memories_for(tenant=session.tenant, qor=qor, user=session.user, query=pending.content),
        compaction_note="\n\n".join(p for p in (session.seed_summary, session.compaction_note) if p.strip()),
        surface_note=f"The current message came from the {pending.channel} surface; answer for that surface.",
    )
    return prompt_build(
        session=session, parts=parts, tools=offered, current=pending, num_ctx=route.num_ctx, reserve=reserve
    )


def _tool_loop(
    session: Session,
    pending: Message,
    provider: Provider,
    route: ModelRoute,
    prompt: Prompt,
    offered: list[Tool],
    ctx: ToolContext,
    owner: str,
) -> None:
    messages = list(prompt.messages)
    max_rounds = settings.QORVEN_MAX_TOOL_ROUNDS
    for round_no in range(max_rounds + 1):
        tools = [t.schema() for t in offered] if round_no < max_rounds else []
        completion = _call(provider, session.pk, pending.seq, messages, tools)
        _record_usage(session, completion, messages)
        turn_lease_acquire(session_id=session.pk, owner=owner, seconds=settings.QORVEN_TURN_LEASE)
        if not completion.tool_calls:
            _reply(session, pending, completion.content, completion=completion)
            return
        calls = [c.as_openai() for c in completion.tool_calls]
        message_append(
            session=session, role=Message.Role.ASSISTANT, content=completion.content, channel=pending.channel,
            tool_calls=calls, metadata={"reply_to": pending.seq},
        )
        messages.append({"role": "assistant", "content": completion.content or None, "tool_calls": calls})
        for call in completion.tool_calls:
            result = registry.execute(ctx, offered, call.name, call.arguments)
            message_append(
                session=session, role=Message.Role.TOOL, content=result, channel=pending.channel,
                tool_call_id=call.id, metadata={"reply_to": pending.seq, "tool": call.name},
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    _reply(session, pending, ROUNDS_NOTICE.format(rounds=max_rounds), notice="tool_rounds")


def _call(
    provider: Provider, session_id: int, reply_to: int, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> Completion:
    async def on_token(delta: str) -> None:
        await broadcast(session_id, {"type": "message.chunk", "reply_to": reply_to, "delta": delta})

    async def run() -> Completion:
        return await provider.complete(messages=messages, tools=tools or None, on_token=on_token)

    return async_to_sync(run)()


def _record_usage(session: Session, completion: Completion, messages: list[dict[str, Any]]) -> None:
    if completion.offline:
        return
    usage = completion.usage or Usage(
        prompt_tokens=sum(estimate_tokens(str(m.get("content") or "")) for m in messages),
        completion_tokens=estimate_tokens(completion.content),
        estimated=True,
    )
    usage_record(
        tenant=session.tenant, qor=session.qor, role="main",
        prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
    )


def _reply(
    session: Session, pending: Message, content: str, *, completion: Completion | None = None, notice: str = ""
) -> Message:
    """Append the final answer (tagged with the inbound channel) and mark it answered, in
    one transaction, then tell streaming surfaces the reply is complete."""
    metadata: dict[str, Any] = {"reply_to": pending.seq}
    if completion is not None:
        metadata["model"] = completion.model
        if completion.usage and not completion.usage.estimated and completion.usage.completion_tokens:
            metadata["tokens"] = completion.usage.completion_tokens
        if completion.offline:
            metadata["notice"] = "offline"
    if notice:
        metadata["notice"] = notice
    with transaction.atomic():
        message = message_append(
            session=session, role=Message.Role.ASSISTANT, content=content, channel=pending.channel,
            sender_name=session.qor.name, metadata=metadata,
        ).message
        session_mark_replied(session_id=session.pk, through_seq=pending.seq)
        # Registered after the reply's message.new, so it follows it through the ordered sender.
        done = {"type": "message.done", "reply_to": pending.seq, "seq": message.seq}
        transaction.on_commit(lambda: broadcast_soon(session.pk, done))
    return message


def _notice(session: Session, pending: Message, content: str, *, notice: str) -> Message:
    """A one-line system notice on the user's surface; the user message stays pending."""
    return message_append(
        session=session, role=Message.Role.SYSTEM, content=content, channel=pending.channel,
        metadata={"notice": notice, "reply_to": pending.seq},
    ).message
