"""The one agent loop: ask the model, run the tools it calls, feed the results back, until
it answers. Turns, heartbeats and the summarizer all call the model through here, so usage
is recorded, tokens stream and failures surface (qorven.llm.errors) the same way for all.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from qorven.llm import Completion, Provider, Usage
from qorven.models import Qor, Tenant
from qorven.services import usage_record
from sessions_app.models import Message, Session
from sessions_app.services import message_append

from .prompt import estimate_tokens
from .tools import Tool, ToolContext, registry


@dataclass
class Tally:
    """What a run of calls spent, for callers that record it (a heartbeat run)."""

    tokens: int = 0
    calls: int = 0


@dataclass(frozen=True)
class Spend:
    """Whose usage a call counts towards: a tenant's Qor, in a role (main, summarizer,
    heartbeat); and a tally to add it to, if any."""

    tenant: Tenant
    qor: Qor
    role: str
    tally: Tally | None = None


def model_call(
    *,
    provider: Provider,
    messages: list[dict[str, Any]],
    spend: Spend,
    tools: list[dict[str, Any]] | None = None,
    on_token: Callable[[str], None] | None = None,
) -> Completion:
    """One model call, its usage recorded (estimated when the server reports none).
    Raises a qorven.llm ModelError."""
    completion = provider.complete(messages=messages, tools=tools or None, on_token=on_token)
    if not completion.offline:
        usage = completion.usage or Usage(
            prompt_tokens=sum(estimate_tokens(str(m.get("content") or "")) for m in messages),
            completion_tokens=estimate_tokens(completion.content),
            estimated=True,
        )
        usage_record(tenant=spend.tenant, qor=spend.qor, role=spend.role,
                     prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
        if spend.tally is not None:
            spend.tally.tokens += usage.prompt_tokens + usage.completion_tokens
            spend.tally.calls += 1
    return completion


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
    after_call: Callable[[], None] | None = None,
) -> Completion | None:
    """Call the model until it answers without calling tools; return that answer.

    Each tool call and its result are stored in `session` (tagged `channel`, with
    `metadata`) and fed back. Tools are offered for QORVEN_MAX_TOOL_ROUNDS rounds, then
    one last call offers none; None when the model still called tools then. `after_call`
    runs after every model call (a turn checks it still holds its session there).
    """
    messages = list(messages)
    max_rounds = settings.QORVEN_MAX_TOOL_ROUNDS
    for round_no in range(max_rounds + 1):
        tools = [t.schema() for t in offered] if round_no < max_rounds else []
        completion = model_call(provider=provider, messages=messages, spend=spend, tools=tools, on_token=on_token)
        if after_call is not None:
            after_call()
        if not completion.tool_calls:
            return completion
        if round_no == max_rounds:
            break
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
