"""A streamed answer put together from its pieces: text mended chunk by chunk (a
character split between two chunks joined again), tool calls from their fragments, within
bounds. Knows nothing of the SDK or HTTP (qorven.llm.openai_provider reads the stream)."""
from __future__ import annotations

import re
from typing import Any

from qorven.runtime.storable_text import storable

from .provider import ToolCall


class ToolCallPieces:
    """The tool calls of a streamed answer, put together from their pieces, within bounds:
    each call's name and arguments together at most `max_chars` characters, at most
    `max_calls` calls (0: no bound), so that a model streaming arguments without end is
    not held in memory whole, stored with the call and fed back to it."""

    def __init__(self, *, max_chars: int, max_calls: int) -> None:
        self._max_chars, self._max_calls = max_chars, max_calls
        self._calls: dict[int, _Call] = {}

    def feed(self, pieces: Any) -> bool:
        """Add one chunk's `tool_calls` pieces; False once past a bound (stop reading)."""
        if not isinstance(pieces, list):
            return True
        for piece in pieces:
            if not isinstance(piece, dict):
                continue
            index = piece.get("index")
            if index is None:  # none given: the first call, as it always was
                index = 0
            elif not isinstance(index, int):
                continue  # not a piece of a tool call
            call = self._calls.get(index)
            if call is None:
                if self._max_calls and len(self._calls) >= self._max_calls:
                    return False
                call = self._calls[index] = _Call()
            if piece.get("id"):
                call.id = str(piece["id"])
            function = piece.get("function")
            if isinstance(function, dict):
                for text, into in ((function.get("name"), call.name), (function.get("arguments"), call.arguments)):
                    if isinstance(text, str) and text:
                        into.append(text)
                        call.size += len(text)
                if self._max_chars and call.size > self._max_chars:
                    return False
        return True

    def clear(self) -> None:
        self._calls.clear()

    def made(self) -> list[ToolCall]:
        """The calls put together, in order; one that never got a name is no call (there is
        nothing to run, and the model would only be told so)."""
        return [
            ToolCall(id=c.id or f"call_{i}", name=mended("".join(c.name)), arguments=mended("".join(c.arguments)))
            for i, c in sorted(self._calls.items()) if c.name
        ]


class _Call:
    __slots__ = ("id", "name", "arguments", "size")

    def __init__(self) -> None:
        self.id = ""
        self.name: list[str] = []
        self.arguments: list[str] = []
        self.size = 0  # characters of name and arguments so far


_SURROGATE = re.compile("[\ud800-\udfff]")


def mended(text: str) -> str:
    """`text` with UTF-16 surrogate halves (which JSON escapes can carry and no store or
    socket takes) joined into the character they make, or replaced where alone; and
    without NUL, which PostgreSQL refuses (qorven.runtime.storable_text), so what streams
    is what is stored."""
    text = storable(text)
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class TextMender:
    """Mends streamed text chunk by chunk: a first half at a chunk's end waits for the
    next chunk, whose first character may complete it."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: Any) -> str:
        if not isinstance(text, str) or not text:
            return ""
        text = self._held + text
        self._held = ""
        if "\ud800" <= text[-1] <= "\udbff":
            text, self._held = text[:-1], text[-1]
        return mended(text)

    def end(self) -> str:
        held, self._held = self._held, ""
        return mended(held)
