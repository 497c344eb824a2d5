"""The one agent loop: ask the model, run the tools it calls, feed the results back, until
it answers. Turns and heartbeats run their tool rounds here; every model call (the
summarizer's too) goes through qorven.llm.metered, so usage is recorded, tokens stream and
failures surface (qorven.llm.errors) the same way for all. A run that goes on from the
rounds an earlier one stored (a retry, a takeover after its worker died) reads them through
`rounds_completed`, so a call whose result was never stored is neither run again nor sent
without one.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings

from qorven.llm import Completion, Provider
from qorven.llm.metered import Spend, model_call
from sessions_app.models import Message, Session
from sessions_app.selectors import StoredMessage
from sessions_app.services.append import message_append
from tenancy.tool_registry import Tool, ToolContext, registry

from .round_pairs import Unanswered, rounds_paired


def tool_loop(
    *,
    provider: Provider,
    messages: list[dict[str, Any]],
    spend: Spend,
    offered: list[Tool],
    ctx: ToolContext,
    session: Session,
    channel: str,
    metadata: dict[str, Any],
    on_token: Callable[[str], None] | None = None,
    after_call: Callable[[Completion], None] | None = None,
    rights: Callable[[], tuple[ToolContext, list[Tool]]] | None = None,
    rounds_done: int = 0,
) -> Completion | None:
    """Call the model until it answers without calling tools; return that answer.

    Each tool call and its result are stored in `session` (tagged `channel`, with
    `metadata`) and fed back. Tools are offered for QORVEN_MAX_TOOL_ROUNDS rounds, then
    one last call offers none; None when the model still called tools then. `after_call`
    runs after every model call with its completion (a turn checks there that it may go
    on, and that it still holds its session before tool calls are stored). `rights`, when
    given, is asked before each round of tools runs: the context and tools the person
    behind the turn has now (their membership may have changed while the model thought).
    `rounds_done`: the rounds an earlier run stored for the same answer (in `messages`),
    counted against the bound.
    """
    messages = list(messages)
    max_rounds = settings.QORVEN_MAX_TOOL_ROUNDS
    for round_no in range(min(rounds_done, max_rounds), max_rounds + 1):
        tools = [t.schema() for t in offered] if round_no < max_rounds else []
        completion = model_call(provider=provider, messages=messages, spend=spend, tools=tools, on_token=on_token)
        if after_call is not None:
            after_call(completion)
        if not completion.tool_calls:
            return completion
        if round_no == max_rounds:
            break
        if rights is not None:
            ctx, offered = rights()
        calls = [c.as_openai() for c in completion.tool_calls]
        message_append(session=session, role=Message.Role.ASSISTANT, content=completion.content, channel=channel,
                       tool_calls=calls, metadata=metadata)
        messages.append({"role": "assistant", "content": completion.content or None, "tool_calls": calls})
        for call in completion.tool_calls:
            result = registry.execute(ctx, offered, call.name, call.arguments)
            message_append(session=session, role=Message.Role.TOOL, content=result, channel=channel,
                           tool_call_id=call.id, metadata={**metadata, "tool": call.name})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


# The result the model reads for a call whose run stopped before its result was stored (the
# worker died while the tool ran): not run again, since it may have taken effect.
LOST_RESULT = json.dumps({"error": "no result: the work stopped while this call ran, so it may or may not "
                                   "have taken effect; it was not run again"})


def rounds_completed(*, session: Session, rounds: Sequence[StoredMessage], channel: str) -> list[StoredMessage]:
    """The tool rounds an earlier run stored for one message (`rounds`, oldest first: its
    messages with tool calls and their results) as the model must read them: each call's
    message, then the result of each of its calls in order. A call whose result was never
    stored (the run's worker died while the tool ran) gets LOST_RESULT, stored now in
    `session` tagged `channel`, with its call's message's metadata: it is not run again,
    the model is told it may or may not have taken effect, and no request holds a call
    without its result (OpenAI-compatible servers refuse that with a 400, every time).
    Anything else in `rounds` (an answer) is left out. Writes only for a call left so; the
    pairing is qorven.agent.round_pairs.rounds_paired's, as a prompt's older rounds get it."""
    out: list[StoredMessage] = []
    calls_and_results = [m for m in rounds if m.role == Message.Role.TOOL
                         or (m.role == Message.Role.ASSISTANT and m.tool_calls)]
    for item in rounds_paired(calls_and_results):
        if isinstance(item, Unanswered):
            item = message_append(
                session=session, role=Message.Role.TOOL, content=LOST_RESULT, channel=channel,
                tool_call_id=item.call_id, metadata={**item.message.metadata, "tool": item.tool},
            ).message
        out.append(item)
    return out
