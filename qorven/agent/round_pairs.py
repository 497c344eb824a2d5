"""Tool calls and their results as a request must carry them: an assistant message with
tool calls followed by one tool message for each call, and no tool message without its
call. OpenAI-compatible servers refuse (400) a request that breaks either, every time, so
one such row in a conversation would fail every later message of it. What is stored need
not be so: a round stored before its run's worker died, or accepted by a lenient server, a
row pruned, a window that begins between a call and its result. `rounds_paired` is the one
place that pairs them; a turn's own pending rounds store what is missing
(qorven.agent.loop.rounds_completed), the older rounds of a prompt's window fill it in for
the request only (qorven.agent.prompt.prompt_build).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sessions_app.models import Message
from sessions_app.selectors import StoredMessage

# What the model reads, in a window's older round, for a call no result was kept for.
UNKEPT_RESULT = json.dumps({"error": "no result was kept for this call: it may or may not have taken effect"})


@dataclass(frozen=True)
class Unanswered:
    """A call of `message` (its dict, as stored) that has no result among the messages paired."""
    message: StoredMessage
    call: dict[str, Any]

    @property
    def call_id(self) -> str:
        return str(self.call.get("id", ""))

    @property
    def tool(self) -> str:
        function = self.call.get("function")
        return str(function.get("name", "")) if isinstance(function, dict) else ""


def rounds_paired(messages: Sequence[StoredMessage]) -> list[StoredMessage | Unanswered]:
    """`messages` (in the order they are sent) with each message of tool calls followed by
    the result of each of its calls, in the calls' order: a call without one gets an
    Unanswered in its place. A call's results are the tool messages after it and before the
    next message with tool calls (servers that number calls, call_0, call_1…, give the next
    round the same ids). A tool message that answers no call is left out; every other
    message keeps its place."""
    calling = [i for i, m in enumerate(messages) if m.role == Message.Role.ASSISTANT and m.tool_calls]
    out: list[StoredMessage | Unanswered] = []
    for n, i in enumerate([-1, *calling]):
        until = calling[n] if n < len(calling) else len(messages)
        if i >= 0:
            message = messages[i]
            out.append(message)
            results = {m.tool_call_id: m for m in messages[i + 1:until] if m.role == Message.Role.TOOL}
            for call in message.tool_calls or []:
                result = results.get(call.get("id", ""))
                out.append(result if result is not None else Unanswered(message, call))
        # The messages up to the next call: tool results were placed after their call, or
        # answer none.
        out += [m for m in messages[i + 1:until] if m.role != Message.Role.TOOL]
    return out
