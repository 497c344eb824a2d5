"""One turn: answer the oldest unanswered user message of a session.

Turns on one session run one at a time, in seq order, across processes: a turn holds the
session's lease (a row-level lease, not a process lock) and answers pending user messages
oldest first. A message that arrives meanwhile is stored and shown at once (appends never
wait for the lease) and answered by the next iteration. Running the task twice is
harmless: an answered message is never answered again.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from django.conf import settings

from qorven.llm import (
    Completion,
    ContextLengthExceeded,
    ModelError,
    ModelRoute,
    ProviderUnavailable,
    Restart,
    provider_for_role,
    route_for,
)
from memory_app.models import LearnedSkill
from memory_app.selectors import skills_for
from qorven.runtime import metrics
from qorven.runtime.database import DATABASE_DOWN, connections_drop_broken
from qorven.runtime.log_context import log_context
from qorven.runtime.publisher import broadcast_soon
from qorven.runtime.task_scope import task_checkpoint
from sessions_app.errors import SenderLeft, SessionClosed
from sessions_app.leases import LeaseLost, lease_kept
from sessions_app.models import Message, Session
from sessions_app.selectors import pending_with_session, session_for_task, session_successor
from sessions_app.services import message_answer_attempted
from sessions_app.turn_writes import (
    turn_lease_acquire,
    turn_lease_confirm,
    turn_lease_end,
    turn_lease_release,
)
from tenancy.access import surface_trust
from tenancy.models import Qor
from tenancy.selectors import budget_exhausted, membership_active
from tenancy.tool_registry import Tool, ToolContext, registry
from tenancy.trust import Trust, trust_allows

from .compaction import (
    auto_compaction_point,
    compact_for_turn,
    compaction_due,
    fixed_tokens,
    summarizer_queue,
)
from .loop import Spend, tool_loop
from .mcp import mcp_tools_offered
from .project import project_context_for
from .prompt import Prompt, PromptParts, prompt_build
from .retrieval import memories_for
from .router import skill_route
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

logger = logging.getLogger(__name__)

STOPPED_NOTICE = "Stopped before any answer was written."
ROUNDS_NOTICE = "I stopped after {rounds} rounds of tool calls without reaching an answer. Please rephrase or narrow the request."


class TurnBusy(Exception):
    """Another process holds the session's turn lease; try again shortly."""


class BudgetReached(ModelError):
    """The tenant's monthly token budget is spent: no model call is made."""

    kind = "budget"


@dataclass
class TurnOutcome:
    answered: int = 0
    failed: int = 0
    retry_after: float | None = None  # a message failed transiently: come back after this long


class _Step(Enum):
    ANSWERED = "answered"  # the message got its reply
    FAILED = "failed"  # it will not be answered: one notice says why, and the turn goes on
    RETRY = "retry"  # a transient failure: it stays pending and the task comes back later
    ROTATED = "rotated"  # manual compaction moved the conversation to a fresh session
    ROTATED_ON_OVERFLOW = "rotated_on_overflow"  # the same, after a context-length error


@dataclass(frozen=True)
class _Result:
    step: _Step
    retry_after: float | None = None


# Called when the provider reports the prompt is too long, before the one retry (after
# manual-mode compaction, which rotates the session, had its chance). In auto mode the
# retry then uses a halved window.
ContextOverflowHook = Callable[[Session], None]
context_overflow_hooks: list[ContextOverflowHook] = []


def turn_process(*, tenant_id: int, session_id: int) -> TurnOutcome:
    """Answer every pending user message of the session, oldest first. Raises TurnBusy at
    once when another turn holds the session (the task comes back later).

    The session's lease is short (QORVEN_TURN_LEASE) and renewed while the turn runs, so a
    turn whose worker died frees its session within seconds. A message that fails for
    good is marked failed with one notice and the turn goes on to the next; one that
    fails transiently stays pending and the outcome says when to come back.
    """
    owner = uuid.uuid4().hex
    if not turn_lease_acquire(session_id=session_id, owner=owner, seconds=settings.QORVEN_TURN_LEASE):
        raise TurnBusy(session_id)
    outcome = TurnOutcome()
    overflowed = False
    released = False
    kept = lease_kept(session_id=session_id, owner=owner)
    try:
        with kept:
            while True:
                if outcome.answered + outcome.failed:
                    kept.letting_go()
                    if turn_lease_end(tenant_id=tenant_id, session_id=session_id, owner=owner):
                        released = True
                        break  # the usual end: nothing left to answer, the session let go in one statement
                    kept.holding()
                    # More to answer: what was answered goes out now (a platform reply is
                    # sent), not once the messages after it are answered too.
                    task_checkpoint()
                # Usually one read: the message to answer, with its session.
                pending = pending_with_session(tenant_id=tenant_id, session_id=session_id)
                if pending is not None and pending.session.state == Session.State.ACTIVE:
                    session = pending.session
                else:
                    found = session_for_task(tenant_id=tenant_id, session_id=session_id)
                    if found is None or found.state == Session.State.ACTIVE:
                        break  # gone, or nothing to answer
                    session = found
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
                    kept.move(session_id)
                    continue
                assert pending is not None
                started = time.perf_counter()
                try:
                    with log_context(qor=session.qor_id, session=session.pk, seq=pending.seq):
                        try:
                            result = _answer(session, pending, owner, overflowed=overflowed)
                        except SenderLeft:  # removed while the model thought: no tool ran, nothing was stored
                            not_a_member_end(session, pending, owner)
                            result = _Result(_Step.FAILED)
                except SessionClosed:
                    continue  # cleared or rotated mid-turn: the reply has no place to go
                if result.step in (_Step.ANSWERED, _Step.FAILED, _Step.RETRY):
                    metrics.turns.labels(result.step.value).inc()
                    metrics.turn_seconds.observe(time.perf_counter() - started)
                overflowed = result.step is _Step.ROTATED_ON_OVERFLOW
                if result.step is _Step.RETRY:
                    outcome.retry_after = result.retry_after
                    break
                if result.step is _Step.FAILED:
                    outcome.failed += 1
                if result.step is _Step.ANSWERED:
                    outcome.answered += 1
    except LeaseLost:
        # The lease ran out under us (a stall longer than the lease) and another turn may
        # hold the session now: this one stops without writing anything more.
        logger.warning("turn on session %s lost its lease; leaving the session to the turn holding it", session_id)
    finally:
        if not released:
            _let_go(session_id, owner)
    return outcome


def _let_go(session_id: int, owner: str) -> None:
    """Release the session's lease, on a fresh connection if a lost one ended the turn;
    if the database is still away the lease runs out by itself (QORVEN_TURN_LEASE)."""
    connections_drop_broken()
    try:
        turn_lease_release(session_id=session_id, owner=owner)
    except DATABASE_DOWN:
        connections_drop_broken()


def _answer(session: Session, pending: Message, owner: str, *, overflowed: bool = False) -> _Result:
    """Answer one user message. `overflowed`: the message comes fresh from a compaction
    forced by a context-length error, so its one retry is spent."""
    qor = session.qor
    channel = pending.channel
    trust = stored = str(pending.metadata.get("trust") or Trust.PAIRED)
    member = answers_a_member(session, pending)
    if session.user is not None and member:
        # As the person's membership is now, not as it was when the message was stored: it
        # may have waited (behind another turn, for a retry) while they were removed or
        # made a member. The surface's proof of the sender was judged then (the cap). Public
        # trust needs no membership (a webchat's anonymous visitor has none).
        role = pending.member_role if hasattr(pending, "member_role") else _role_now(session)
        if role is None or not session.user.is_active:
            not_a_member_end(session, pending, owner)
            return _Result(_Step.FAILED)
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
        return _Result(_Step.ANSWERED)
    if budget_exhausted(tenant=session.tenant):
        fail_end(session, pending, owner, BudgetReached("the tenant's monthly token budget is spent"))
        return _Result(_Step.FAILED)
    route = route_for(qor, "main")
    provider = provider_for_role(qor, "main")
    offered = [] if route.offline else tools
    manual = qor.summarizer_mode == Qor.SummarizerMode.MANUAL
    reserve = settings.QORVEN_CONTEXT_RESERVE
    prompt = _prompt(session, qor, pending, offered, route, trust, reserve, skills)
    if manual and not overflowed and compaction_due(
        session=session, prompt=prompt, num_ctx=route.num_ctx, threshold=qor.compact_threshold
    ):
        if compact_for_turn(session=session, pending=pending, overflow=False) is not None:
            return _Result(_Step.ROTATED)

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
        given a lower role (the tools above it are no longer theirs). An answer without
        tools is checked as it is stored (reply_end)."""
        if not member:
            return ctx, offered
        now = _trust_now(session, channel, cap=stored)
        if now is None:
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
            completion = tool_loop(
                provider=provider, messages=prompt.messages, spend=Spend(session.tenant, qor, "main"),
                offered=offered, ctx=ctx, session=session, channel=channel, metadata={"reply_to": pending.seq},
                on_token=on_token, after_call=after_call, rights=rights,
            )
        except TurnStopped:
            # What was written so far is the answer, marked as stopped; nothing is retried.
            text = "".join(written).strip()
            reply_end(session, pending, owner, text or STOPPED_NOTICE, metadata={"stopped": True},
                   notice="" if text else "stopped")
            return _Result(_Step.ANSWERED)
        except ContextLengthExceeded as exc:
            if attempt == 1:
                if uncompacted:
                    exc.kind = "too_long_uncompacted"  # not tried in a fresh conversation: say so
                fail_end(session, pending, owner, exc)
                return _Result(_Step.FAILED)
            logger.info("context length exceeded on session %s; compacting or shrinking, retrying once", session.pk)
            if manual and compact_for_turn(session=session, pending=pending, overflow=True) is not None:
                return _Result(_Step.ROTATED_ON_OVERFLOW)
            uncompacted = manual
            for hook in context_overflow_hooks:
                hook(session)
            session.refresh_from_db()
            reserve = max(reserve, route.num_ctx // 2)
            prompt = _prompt(session, qor, pending, offered, route, trust, reserve, skills)
            continue
        except ProviderUnavailable as exc:
            tries = message_answer_attempted(message=pending)
            if exc.retry_after is not None and exc.retry_after > LONGEST_ANSWER_WAIT:
                # The server asks for a long wait: the person hears it now (the notice says
                # when /retry can help), not after hours of silent tries.
                fail_end(session, pending, owner, exc)
                return _Result(_Step.FAILED)
            if tries < settings.QORVEN_ANSWER_ATTEMPTS:
                restart()
                delay = exc.retry_after if exc.retry_after is not None else answer_backoff(tries)
                logger.warning("model unavailable for message %s of session %s (try %s, again in %.1fs): %s",
                               pending.seq, session.pk, tries, delay, exc.detail)
                return _Result(_Step.RETRY, retry_after=delay)
            fail_end(session, pending, owner, exc)
            return _Result(_Step.FAILED)
        except ModelError as exc:  # refused for good: this message only
            fail_end(session, pending, owner, exc)
            return _Result(_Step.FAILED)
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
        return _Result(_Step.ANSWERED)
    return _Result(_Step.FAILED)


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


def _prompt(
    session: Session, qor: Qor, pending: Message, offered: list[Tool], route: ModelRoute, trust: str, reserve: int,
    skills: list[LearnedSkill],
) -> Prompt:
    parts = PromptParts(
        system_prompt=qor.system_prompt,
        project_context=project_context_for(qor),
        skills=[(s.name, s.description) for s in skills],
        memories=memories_for(tenant=session.tenant, qor=qor, user=session.user, query=pending.content),
        compaction_note="\n\n".join(p for p in (session.seed_summary, session.compaction_note) if p.strip()),
        surface_note=f"The current message came from the {pending.channel} surface; answer for that surface.",
    )
    return prompt_build(
        session=session, parts=parts, tools=offered, current=pending, num_ctx=route.num_ctx, reserve=reserve,
        trust=trust, vision=route.vision,
    )


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
