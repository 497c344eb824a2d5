"""The private reasoning a thinking model writes before its answer, left out of the answer.

Reasoning models served locally (Qwen3, DeepSeek-R1, QwQ... through Ollama, vLLM without a
reasoning parser, LM Studio, llama.cpp) put their reasoning in the answer's text, in a
block opened by <think> (or <thinking>) before anything else. That block is the model's
scratch work, not the reply: it is not streamed, stored, sent to a platform, nor read back
by the model in later turns (their chat templates drop it from the history too). A tag
anywhere else in the text (an answer that speaks of the tags) is the answer's own.
Reasoning a server sends apart (`reasoning_content`) is never read as the answer either.
"""
from __future__ import annotations

from enum import Enum

_OPENINGS = ("<think>", "<thinking>")


class _State(Enum):
    START = "start"  # only whitespace so far: a block may still open
    THINKING = "thinking"  # inside the block, until its closing tag
    AFTER = "after"  # the block closed: the whitespace before the answer is dropped
    ANSWER = "answer"  # everything from here on is the answer


class ThinkingFilter:
    """Fed the answer's text piece by piece as it streams, gives back what is the answer.
    A tag cut between two pieces is held until the next piece tells what it is."""

    def __init__(self) -> None:
        self._state = _State.START
        self._held = ""
        self._closing = ""

    @property
    def dropped(self) -> bool:
        """A reasoning block was found (and left out)."""
        return bool(self._closing)

    def feed(self, text: str) -> str:
        if self._state is _State.ANSWER or not text:
            return text
        self._held += text
        if self._state is _State.START:
            lead = self._held.lstrip()
            opening = next((tag for tag in _OPENINGS if lead.startswith(tag)), None)
            if opening is not None:
                self._state, self._closing = _State.THINKING, "</" + opening[1:]
                self._held = lead[len(opening):]
            elif not lead or any(tag.startswith(lead) for tag in _OPENINGS):
                return ""  # whitespace, or the start of a tag not yet whole
            else:
                self._state = _State.ANSWER
                return self._release()
        if self._state is _State.THINKING:
            end = self._held.find(self._closing)
            if end < 0:
                # Only what may be the start of the closing tag is worth keeping.
                self._held = self._held[-(len(self._closing) - 1):]
                return ""
            self._state = _State.AFTER
            self._held = self._held[end + len(self._closing):]
        self._held = self._held.lstrip()
        if not self._held:
            return ""
        self._state = _State.ANSWER
        return self._release()

    def end(self) -> str:
        """What is still held once the answer has ended: text that only looked like the
        start of a tag is the answer's; an unclosed block's reasoning is not."""
        if self._state is _State.THINKING:
            self._held = ""
        return self._release()

    def _release(self) -> str:
        held, self._held = self._held, ""
        return held
