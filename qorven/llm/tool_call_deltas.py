"""Tool calls put together from a stream's deltas, as servers really send them.

OpenAI numbers each call (`index`) and sends its id and name in its first fragment, then
pieces of its arguments. Other OpenAI-compatible servers do not all: Gemini's endpoint and
mistral.rs leave `index` out, Ollama behind LiteLLM and some vLLM parsers put every call at
index 0, some servers give two calls one id. Read by index alone, parallel calls were
joined into one ("current_timememory_search", '{}{"query": …}') that no tool answers.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .provider import ToolCall


class ToolCallAssembler:
    """A fragment starts a new call when it has no earlier call to continue, or when it
    plainly is another call: an id other than the call's own, or a name when the call
    already has its name and arguments. Otherwise it continues the call at its index (the
    last call begun, when it has none).

    Within bounds: each call's name and arguments together at most `max_chars` characters,
    at most `max_calls` calls (0: no bound), so that a model streaming arguments without
    end is not held in memory whole, stored with the call and fed back to it."""

    def __init__(self, *, max_chars: int = 0, max_calls: int = 0) -> None:
        self._max_chars, self._max_calls = max_chars, max_calls
        self._calls: list[dict[str, str]] = []
        self._at: dict[int, int] = {}  # the server's index → the call it continues now
        self._last: int | None = None

    def feed(self, fragment: Any) -> bool:
        """Add one fragment; False once past a bound (stop reading)."""
        if not isinstance(fragment, dict):
            return True
        index = fragment.get("index")
        if index is not None and type(index) is not int:
            return True  # an index that is no number: not a piece of a tool call
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        fid, name = _text(fragment.get("id")), _text(function.get("name"))
        position = self._last if index is None else self._at.get(index)
        if position is not None:
            current = self._calls[position]
            if (fid and current["id"] and fid != current["id"]) or (name and current["name"] and current["arguments"]):
                position = None
        if position is None:
            if self._max_calls and len(self._calls) >= self._max_calls:
                return False
            self._calls.append({"id": "", "name": "", "arguments": ""})
            position = len(self._calls) - 1
        if index is not None:
            self._at[index] = position
        self._last = position
        current = self._calls[position]
        current["id"] = fid or current["id"]
        current["name"] += name
        current["arguments"] += _text(function.get("arguments"))
        return not self._max_chars or len(current["name"]) + len(current["arguments"]) <= self._max_chars

    def clear(self) -> None:
        self._calls.clear()
        self._at.clear()
        self._last = None

    def calls(self, mend: Callable[[str], str]) -> list[ToolCall]:
        """The calls, in the order they began, each with an id of its own (one given
        none, or an id an earlier call has, gets call_<n>). One that never got a name is no
        call: there is nothing to run, and the model would only be told so."""
        taken: set[str] = set()
        out = []
        for n, call in enumerate(self._calls):
            if not call["name"]:
                continue
            cid = call["id"]
            if not cid or cid in taken:
                cid = f"call_{n}"
                while cid in taken:
                    cid += "_"
            taken.add(cid)
            out.append(ToolCall(id=cid, name=mend(call["name"]), arguments=mend(call["arguments"])))
        return out

    def __bool__(self) -> bool:
        return bool(self._calls)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
