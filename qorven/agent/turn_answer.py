"""Answering one user message of a turn: the sender's rights as they are now, what the
model is offered, the tool loop with the reply streaming to the live surfaces as it is
written, and what each way a model call can fail means for the message (answered, failed
with a notice, tried again later, or moved to a compacted session). Apart from
qorven.agent.turns, which only takes the messages in order under the session's lease.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from django.conf import settings

from memory_app.models import LearnedSkill
from memory_app.selectors import skills_for
from qorven.llm import (
    Completion,
    ContextLengthExceeded,
    ModelError,
    ModelRoute,
    ProviderUnavailable,
    Restart,
    WaitingForSlot,
    provider_for_role,
    route_for,
)
from qorven.runtime.publisher import broadcast_soon
from sessions_app.errors import SenderLeft, WorkspaceSuspended
from sessions_app.models import Message, Session
from sessions_app.services.answers import message_answer_attempted
from sessions_app.turn_writes import turn_lease_confirm
from tenancy.access import surface_trust, tenant_serving
from tenancy.models import Qor
from tenancy.selectors import budget_exhausted, membership_active, tenant_serving_now
from tenancy.tool_registry import Tool, ToolContext, registry
from tenancy.trust import Trust, trust_allows

from .compaction import (
    auto_compaction_point,
    compact_for_turn,
    compaction_due,
    fixed_tokens,
    summarizer_queue,
)
from .loop import Spend, rounds_completed, tool_loop
from .mcp import mcp_tools_offered
from .project import project_context_for
from .prompt import Prompt, PromptParts, prompt_build
from .retrieval import memories_for
from .router import skill_route
from .slot_places import message_slot_ticket, slot_place_give_up, slot_place_moved, slot_place_note
from .stop import StopWatch, TurnStopped
from .turn_endings import (
    CUT_OFF_NOTICE,
    answers_a_member,
    cut_short,
    cut_short_notice,
    fail_end,
    not_a_member_end,
    reply_end,
)

# Logged as the turn, as qorven.agent.turn_endings is: one logger for all a turn does.
logger = logging.getLogger("qorven.agent.turns")

STOPPED_NOTICE = "Stopped before any answer was written."
ROUNDS_NOTICE = "I stopped after {rounds} rounds of tool calls without reaching an answer. Please rephrase or narrow the request."


class BudgetReached(ModelError):
    """The tenant's monthly token budget is spent: no model call is made."""

    kind = "budget"


class AnswerStep(Enum):
    ANSWERED = "answered"  # the message got its reply
    FAILED = "failed"  # it will not be answered: one notice says why, and the turn goes on
    RETRY = "retry"  # a transient failure: it stays pending and the task comes back later
    WAITING = "waiting"  # for a slot of its capped route: the same, with no try used up
    ROTATED = "rotated"  # manual compaction moved the conversation to a fresh session
    ROTATED_ON_OVERFLOW = "rotated_on_overflow"  # the same, after a context-length error


@dataclass(frozen=True)
class AnswerResult:
    step: AnswerStep
    retry_after: float | None = None


# Called when the provider reports the prompt is too long, before the one retry (after
# manual-mode compaction, which rotates the session, had its chance). In auto mode the
# retry then uses a halved window.
ContextOverflowHook = Callable[[Session], None]
context_overflow_hooks: list[ContextOverflowHook] = []


def answer_message(session: Session, pending: Message, owner: str, *, overflowed: bool = False) -> AnswerResult:
    """Answer one user message. `overflowed`: the message comes fresh from a compaction
    forced by a context-length error, so its one retry is spent.

    A message that waited for a capped route's slot has a place in the route's queue:
    unless it goes on waiting, it gives that place up whichever way it ends (answered,
    failed before any call, moved to a fresh session, an error). Kept, the place held
    every later call to that server, any tenant's, until it lapsed (TICKET_PRESENCE)."""
    result: AnswerResult | None = None
    try:
        result = _answer(session, pending, owner, overflowed=overflowed)
    finally:
        if result is None or result.step is not AnswerStep.WAITING:
            slot_place_give_up(session, pending)
    return result


def _answer(session: Session, pending: Message, owner: str, *, overflowed: bool) -> AnswerResult:
    qor = session.qor
    channel = pending.channel
    trust = stored = str(pending.metadata.get("trust") or Trust.PAIRED)
    member = answers_a_member(session, pending)
    if not tenant_serving(session.tenant):  # suspended by the host since the message came (read with it)
        not_a_member_end(session, pending, owner, reason=WorkspaceSuspended.reason)
        return AnswerResult(AnswerStep.FAILED)
    if session.user is not None and member:
        # As the person's membership is now, not as it was when the message was stored: it
        # may have waited (behind another turn, for a retry) while they were removed or
        # made a member. The surface's proof of the sender was judged then (the cap). Public
        # trust needs no membership (a webchat's anonymous visitor has none).
        role = pending.member_role if hasattr(pending, "member_role") else _role_now(session)
        if role is None or not session.user.is_active:
            not_a_member_end(session, pending, owner)
            return AnswerResult(AnswerStep.FAILED)
        trust = str(surface_trust(role=role, surface=channel, proven=True, cap=trust))
    tools = [*registry.offered(tenant=session.tenant, qor=qor, trust=trust),
             *mcp_tools_offered(tenant=session.tenant, qor=qor, trust=trust)]
    ctx = ToolContext(
        tenant=session.tenant, qor=qor, user=session.user, session_id=session.pk, channel=channel, trust=trust
    )
    skills = skills_for(tenant=session.tenant, trust=trust)
    routed = skill_route(skills=skills, message=pending, ctx=ctx, offered=tools)
    if routed is not None:  # answered by a skill's trigger: no model call
        reply_end(session, pending, owner, routed.text, metadata={"skill": routed.skill, "routed": True})
        return AnswerResult(AnswerStep.ANSWERED)
    if budget_exhausted(tenant=session.tenant):
        fail_end(session, pending, owner, BudgetReached("the tenant's monthly token budget is spent"))
        return AnswerResult(AnswerStep.FAILED)
    route = route_for(qor, "main")
    provider = provider_for_role(qor, "main")
    offered = [] if route.offline else tools
    slot_place_moved(session, pending)  # the route changed while it waited: its old place goes
    try:
        with message_slot_ticket(session, pending):
            # A turn waiting for a capped route's slot comes back for it again and again,
            # and most of those times it is still taken: the turn looks before it builds
            # the prompt (the person's memories searched, the conversation's window read).
            provider.slot_look()
    except WaitingForSlot as exc:
        slot_place_note(pending, exc)
        return AnswerResult(AnswerStep.WAITING, retry_after=exc.retry_after)
    manual = qor.summarizer_mode == Qor.SummarizerMode.MANUAL
    reserve = settings.QORVEN_CONTEXT_RESERVE
    prompt = turn_prompt(session=session, qor=qor, pending=pending, offered=offered, route=route, trust=trust,
                         reserve=reserve, skills=skills)
    if manual and not overflowed and compaction_due(
        session=session, prompt=prompt, num_ctx=route.num_ctx, threshold=qor.compact_threshold
    ):
        with message_slot_ticket(session, pending):
            # The compaction's calls (on their thread) may go to this route's server: they
            # would wait behind the message's place in its queue, kept for the call after them.
            provider.slot_leave()
        if compact_for_turn(session=session, pending=pending, overflow=False) is not None:
            return AnswerResult(AnswerStep.ROTATED)

    stop = StopWatch(session_id=session.pk, reply_to=pending.seq)
    written: list[str] = []

    def on_token(delta: str) -> None:
        stop.check()  # before the token: what the person saw is what is kept
        if isinstance(delta, Restart):  # what streamed was the model's reasoning (qorven.llm.thinking)
            restart()
        if not delta:  # the server is there, with nothing to show yet (keep-alives)
            return
        written.append(delta)
        broadcast_soon(session.pk, {"type": "message.chunk", "reply_to": pending.seq, "delta": delta})

    def restart() -> None:
        """What streamed so far is not the answer (a try that failed, a tool round's
        preamble): the live surfaces start the reply afresh."""
        if written:
            written.clear()
            broadcast_soon(session.pk, {"type": "message.restart", "reply_to": pending.seq})

    def rights() -> tuple[ToolContext, list[Tool]]:
        """Before tools run on the person's behalf: as their membership is now. The model
        may have thought for minutes while they were removed (no tool runs, no answer) or
        given a lower role (the tools above it are no longer theirs), or the host may have
        suspended the workspace (no tool runs for anyone in it, a group's chat included).
        An answer without tools is checked as it is stored (reply_end)."""
        if not member:
            if not tenant_serving_now(tenant_id=session.tenant_id):
                raise WorkspaceSuspended(session.pk)
            return ctx, offered
        now = _trust_now(session, channel, cap=stored)
        if now is None:
            if not tenant_serving_now(tenant_id=session.tenant_id):  # why they are refused, for the admin
                raise WorkspaceSuspended(session.pk)
            raise SenderLeft(session.pk)
        if now == ctx.trust:
            return ctx, offered
        return replace(ctx, trust=now), [t for t in offered if trust_allows(now, t.min_trust)]

    def after_call(completion: Completion) -> None:
        if completion.tool_calls:  # they are stored next; a final answer confirms the lease as it is stored
            turn_lease_confirm(session_id=session.pk, owner=owner)
            restart()
        stop.check()  # asked to stop while the model thought, or between tool rounds

    uncompacted = False  # manual mode could not compact to make room
    for attempt in range(1 if overflowed else 0, 2):
        try:
            with message_slot_ticket(session, pending):
                completion = tool_loop(
                    provider=provider, messages=prompt.messages,
                    spend=Spend(session.tenant, qor, "main", user_id=session.user_id, session_id=session.pk),
                    offered=offered, ctx=ctx, session=session, channel=channel, metadata={"reply_to": pending.seq},
                    on_token=on_token, after_call=after_call, rights=rights,
                    rounds_done=_rounds_stored(prompt, pending),
                )
        except TurnStopped:
            # What was written so far is the answer, marked as stopped; nothing is retried.
            # It is what the person was shown, also from a model seen writing its reasoning
            # untagged and stopped before any closing tag: nothing tells that text from an
            # answer (such a model may answer with no reasoning), and the person stopped
            # what they were reading.
            text = "".join(written).strip()
            reply_end(session, pending, owner, text or STOPPED_NOTICE, metadata={"stopped": True},
                   notice="" if text else "stopped")
            return AnswerResult(AnswerStep.ANSWERED)
        except ContextLengthExceeded as exc:
            if attempt == 1:
                if uncompacted:
                    exc.kind = "too_long_uncompacted"  # not tried in a fresh conversation: say so
                fail_end(session, pending, owner, exc)
                return AnswerResult(AnswerStep.FAILED)
            if not tenant_serving_now(tenant_id=session.tenant_id):
                raise WorkspaceSuspended(session.pk)  # suspended while the model read it: no compaction, no retry
            logger.info("context length exceeded on session %s; compacting or shrinking, retrying once", session.pk)
            if manual and compact_for_turn(session=session, pending=pending, overflow=True) is not None:
                return AnswerResult(AnswerStep.ROTATED_ON_OVERFLOW)
            uncompacted = manual
            for hook in context_overflow_hooks:
                hook(session)
            session.refresh_from_db()
            pending.memories_held = True  # type: ignore[attr-defined]  # a hook may have written one (a digest)
            reserve = max(reserve, route.num_ctx // 2)
            prompt = turn_prompt(session=session, qor=qor, pending=pending, offered=offered, route=route,
                                 trust=trust, reserve=reserve, skills=skills)
            continue
        except WaitingForSlot as exc:
            # Not a failure: no try is used up. The message keeps its place in the route's
            # queue and the task comes back for it; past QORVEN_MODEL_DEADLINE of waiting,
            # the call fails as the model being unavailable (below).
            restart()
            slot_place_note(pending, exc)
            return AnswerResult(AnswerStep.WAITING, retry_after=exc.retry_after)
        except ProviderUnavailable as exc:
            tries = message_answer_attempted(message=pending)
            if exc.retry_after is not None and exc.retry_after > LONGEST_ANSWER_WAIT:
                # The server asks for a long wait: the person hears it now (the notice says
                # when /retry can help), not after hours of silent tries.
                fail_end(session, pending, owner, exc)
                return AnswerResult(AnswerStep.FAILED)
            if tries < settings.QORVEN_ANSWER_ATTEMPTS:
                restart()
                delay = exc.retry_after if exc.retry_after is not None else answer_backoff(tries)
                logger.warning("model unavailable for message %s of session %s (try %s, again in %.1fs): %s",
                               pending.seq, session.pk, tries, delay, exc.detail)
                return AnswerResult(AnswerStep.RETRY, retry_after=delay)
            fail_end(session, pending, owner, exc)
            return AnswerResult(AnswerStep.FAILED)
        except ModelError as exc:  # refused for good: this message only
            fail_end(session, pending, owner, exc)
            return AnswerResult(AnswerStep.FAILED)
        if completion is None:
            reply_end(session, pending, owner, ROUNDS_NOTICE.format(rounds=settings.QORVEN_MAX_TOOL_ROUNDS),
                   notice="tool_rounds")
        else:
            metadata: dict[str, Any] = {"model": completion.model}
            if completion.route:  # the role has fallbacks: which route answered
                metadata["route"] = completion.route
            if completion.usage and not completion.usage.estimated and completion.usage.completion_tokens and (
                    not completion.reasoned):  # its count is the reasoning's too, not the stored reply's size
                metadata["tokens"] = completion.usage.completion_tokens
            if completion.offline:
                metadata["notice"] = "offline"
            if reason := cut_short(completion):
                metadata[reason] = True
            if completion.cut_off and not completion.content.strip():
                # Cut before any text (a tool call's arguments ran past the bound): our notice
                # is the whole reply, as a Stop before any text is.
                reply_end(session, pending, owner, CUT_OFF_NOTICE, metadata=metadata, notice="cut_off")
            else:
                reply_end(session, pending, owner, completion.content, metadata=metadata)
                cut_short_notice(session, pending, completion)
        if not manual:
            _after_exchange(session, route, prompt, reserve, pending)
        return AnswerResult(AnswerStep.ANSWERED)
    return AnswerResult(AnswerStep.FAILED)


LONGEST_ANSWER_WAIT = 120.0  # seconds a message waits for a server's Retry-After before it fails with a notice


def answer_backoff(tries: int) -> float:
    """Seconds before the next try at a message that failed transiently `tries` times:
    QORVEN_ANSWER_RETRY_DELAY, then four times as long each time."""
    return settings.QORVEN_ANSWER_RETRY_DELAY * 4 ** max(tries - 1, 0)


def _after_exchange(session: Session, route: ModelRoute, prompt: Prompt, reserve: int, pending: Message) -> None:
    """Auto mode: once the uncompacted messages outgrow the window, queue the summarizer.
    The compaction point is the one the turn started from: a summarizer that moved it
    meanwhile only makes this count a little more than it needs (and a run it queues for
    a range already condensed is skipped). What the prompt's window read is not read again."""
    budget = route.num_ctx - reserve - fixed_tokens(prompt)
    point = auto_compaction_point(session=session, budget=budget, answered=(prompt, pending.seq))
    if point is not None:
        summarizer_queue(session=session, through_seq=point)


def turn_prompt(
    *, session: Session, qor: Qor, pending: Message, offered: list[Tool], route: ModelRoute, trust: str,
    reserve: int, skills: list[LearnedSkill],
) -> Prompt:
    """The request a turn sends to answer `pending`: the Qor's prompt, project context,
    `skills`, the memories retrieved for the message and the compaction note, around the
    message window that fits `route`'s context less `reserve` (qorven.agent.prompt). The
    tool rounds an earlier run of the turn stored for `pending` go with it; a call of theirs
    whose result was never stored (that run's worker died while the tool ran) gets one
    saying it may or may not have taken effect (qorven.agent.loop.rounds_completed), and
    the request is built again with it: it is not run again, nor sent without a result."""
    parts = PromptParts(
        system_prompt=qor.system_prompt,
        project_context=project_context_for(qor),
        skills=[(s.name, s.description) for s in skills],
        memories=memories_for(tenant=session.tenant, qor=qor, user=session.user, query=pending.content,
                              held=getattr(pending, "memories_held", True), own_zone=getattr(pending, "own_zone", None)),
        compaction_note="\n\n".join(p for p in (session.seed_summary, session.compaction_note) if p.strip()),
        surface_note=f"The current message came from the {pending.channel} surface; answer for that surface.",
    )
    def build() -> Prompt:
        return prompt_build(session=session, parts=parts, tools=offered, current=pending, num_ctx=route.num_ctx,
                            reserve=reserve, trust=trust, vision=route.vision)

    prompt = build()
    rounds = [m for m in prompt.window if m.seq > pending.seq and m.metadata.get("reply_to") == pending.seq]
    if rounds and any(m not in rounds for m in rounds_completed(session=session, rounds=rounds,
                                                                channel=pending.channel)):
        prompt = build()
    return prompt


def _rounds_stored(prompt: Prompt, pending: Message) -> int:
    """The tool rounds an earlier run of the turn stored for `pending`, which its prompt
    goes on from (qorven.agent.prompt)."""
    return sum(1 for m in prompt.window if m.seq > pending.seq and m.role == Message.Role.ASSISTANT
               and m.tool_calls and m.metadata.get("reply_to") == pending.seq)


def _trust_now(session: Session, channel: str, *, cap: str) -> str | None:
    """The turn's trust from the person's membership now; None when they have none."""
    assert session.user is not None
    membership = membership_active(tenant=session.tenant, user=session.user)
    if membership is None:
        return None
    return str(surface_trust(role=membership.role, surface=channel, proven=True, cap=cap))


def _role_now(session: Session) -> str | None:
    """The session's person's role in its tenant now (a message not read with it)."""
    membership = membership_active(tenant=session.tenant, user=session.user) if session.user else None
    return membership.role if membership is not None else None
