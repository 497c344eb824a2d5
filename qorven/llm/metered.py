"""A model call whose usage is recorded against a tenant's Qor in a role. Every caller —
the agent's tool loop, heartbeats, the summarizer — calls the model through `model_call`,
so usage is counted the same way for all."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qorven.runtime import metrics
from qorven.runtime.route_slots import slot_tenant
from tenancy.models import Qor, Tenant
from tenancy.services import usage_record

from .errors import ModelError
from .provider import Completion, Provider, Usage
from .thinking import reasoner_scope


def estimate_tokens(text: str) -> int:
    """A character-based estimate (about four characters a token) for when the provider
    has not told us the real count."""
    return len(text) // 4 + 1


@dataclass
class Tally:
    """What a run of calls spent, for callers that record it (a heartbeat run)."""

    tokens: int = 0
    calls: int = 0


@dataclass(frozen=True)
class Spend:
    """Whose usage a call counts towards: a tenant's Qor, in a role (main, summarizer,
    heartbeat); and a tally to add it to, if any. The chat the call is made for (its
    person, else its session) keeps what is learned of the model's reasoning to that chat
    (qorven.llm.thinking)."""

    tenant: Tenant
    qor: Qor
    role: str
    tally: Tally | None = None
    user_id: int | None = None
    session_id: int | None = None


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
    started = time.perf_counter()
    try:
        # A capped route's slot is waited for in the tenant's turn (a turn's ticket names
        # its tenant too): the route is shared by every tenant.
        with slot_tenant(spend.tenant.pk), reasoner_scope(tenant_id=spend.tenant.pk, user_id=spend.user_id,
                                                           session_id=spend.session_id):
            completion = provider.complete(messages=messages, tools=tools or None, on_token=on_token)
    except ModelError as exc:
        metrics.model_calls.labels(spend.role, exc.kind).inc()
        raise
    finally:
        metrics.model_call_seconds.labels(spend.role).observe(time.perf_counter() - started)
    metrics.model_calls.labels(spend.role, "ok").inc()
    if not completion.offline:
        usage = completion.usage or Usage(
            prompt_tokens=sum(estimate_tokens(str(m.get("content") or "")) for m in messages),
            completion_tokens=estimate_tokens(completion.content),
            estimated=True,
        )
        usage_record(tenant=spend.tenant, qor=spend.qor, role=spend.role, route=completion.route,
                     prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
        metrics.model_tokens.labels(spend.role, "prompt").inc(usage.prompt_tokens)
        metrics.model_tokens.labels(spend.role, "completion").inc(usage.completion_tokens)
        if spend.tally is not None:
            spend.tally.tokens += usage.prompt_tokens + usage.completion_tokens
            spend.tally.calls += 1
    return completion
