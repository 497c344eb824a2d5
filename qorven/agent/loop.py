"""The one agent loop: ask the model, run the tools it calls, feed the results back, until
it answers. Turns and heartbeats run their tool rounds here; every model call (the
summarizer's too) goes through qorven.llm.metered, so usage is recorded, tokens stream and
failures surface (qorven.llm.errors) the same way for all.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from qorven.llm import Completion, Provider
from qorven.llm.metered import Spend, model_call
from sessions_app.models import Message, Session
from sessions_app.services import message_append
from tenancy.tool_registry import Tool, ToolContext, registry


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
