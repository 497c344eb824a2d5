"""The provider interface: one streamed chat completion, with tools. Synchronous: model
calls run in tasks, on worker threads, through one long-lived client per route."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

# Called with each piece of the answer as it streams in, and with "" now and then while the
# server sends nothing to show (keep-alives): a caller's chance to stop the call (by raising).
TokenCallback = Callable[[str], None]


class Restart(str):
    """Given to a TokenCallback (as RESTART): the text streamed so far in this answer is
    not the answer (a thinking model's reasoning, ended by a closing tag with no opening
    one); the answer streams again from the next piece. Empty, so a callback that does
    not look for it takes it for "nothing to show yet"."""


RESTART = Restart()


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it; parsed by the tool loop

    def as_openai(self) -> dict[str, Any]:
        """The call as it is stored and sent back with the history. Arguments that are not
        a JSON object (broken JSON, an array, a bare string, nothing) go back as `{}`:
        Ollama refuses a whole request whose history holds one, and the tool's result
        already tells the model what was wrong with them."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": object_text(self.arguments)}}


def object_text(arguments: str) -> str:
    """`arguments` when they are a JSON object, else `{}` (see ToolCall.to_openai)."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except ValueError:
        return "{}"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False


@dataclass
class Completion:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    model: str = ""
    offline: bool = False
    route: str = ""  # which of the role's routes answered ("main", "main fallback 1"), when it has several
    cut_off: bool = False  # a length limit ended the answer (the model's: finish_reason "length"; or ours)
    withheld: bool = False  # the provider's content filter stopped the answer partway (finish_reason "content_filter")
    # The model reasoned before answering (a <think> block, `reasoning_content`): its
    # completion tokens count that reasoning, not only the answer's text.
    reasoned: bool = False


class Provider(Protocol):
    model: str

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        """Run one chat completion. Streams content tokens to `on_token` when given.
        Raises a ModelError: ProviderUnavailable, ModelRefused or ContextLengthExceeded."""
        ...

    def slot_look(self) -> None:
        """Inside a slot ticket (qorven.runtime.route_slots.slot_ticket): raises
        WaitingForSlot when a call made now would wait for a slot of its capped server,
        before anything is prepared for the call. Otherwise nothing."""
        ...

    def slot_leave(self) -> None:
        """Inside a slot ticket: give up its place in the queue of its capped server, if
        it has one (other calls of this task come first)."""
        ...
