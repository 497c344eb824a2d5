"""The private reasoning a thinking model writes before its answer, left out of the answer.

Reasoning models served locally (Qwen3, DeepSeek-R1, QwQ... through Ollama, vLLM without a
reasoning parser, LM Studio, llama.cpp) put their reasoning in the answer's text, in a
block opened by <think> (or <thinking>) before anything else. That block is the model's
scratch work, not the reply: it is not streamed, stored, sent to a platform, nor read back
by the model in later turns (their chat templates drop it from the history too).

Where the chat template itself opens the block (in the prompt: Qwen3 and DeepSeek-R1 on
vLLM without a reasoning parser, some llama.cpp setups), the answer has no opening tag: it
is the reasoning, a closing </think>, then the answer. Nothing tells that reasoning from
an answer until its closing tag comes, so it streams as it comes; the closing tag takes
it back, and only what follows is the answer. A closing tag counts so when it is the
first tag of the answer, outside code, and starts its line or is written onto the
reasoning's last word (`…so I greet them.</think>Hello!`); one after a space (`the
closing tag is </think>`), quoted, in code or after an opening tag is text the answer
speaks of, as is a tag anywhere after the answer has begun.
Reasoning a server sends apart (`reasoning_content`) is never read as the answer either.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from enum import Enum

from django.core.cache import cache

logger = logging.getLogger(__name__)

_OPENINGS = ("<think>", "<thinking>")
_CLOSINGS = ("</think>", "</thinking>")
_APART = "\"'`([{<«“‘"  # before a tag the answer speaks of: it is quoted or set apart


class _State(Enum):
    START = "start"  # only whitespace so far: a block may still open
    THINKING = "thinking"  # inside the block, until its closing tag
    BARE = "bare"  # text with no opening tag: the reasoning of a block the prompt opened, or the answer
    AFTER = "after"  # the block closed: the whitespace before the answer is dropped
    ANSWER = "answer"  # everything from here on is the answer


class ThinkingFilter:
    """Fed the answer's text piece by piece as it streams, gives back what is the answer
    (`taken_back` says when what it gave before was reasoning after all). A tag cut
    between two pieces is held until the next piece tells what it is."""

    def __init__(self) -> None:
        self._state = _State.START
        self._held = ""
        self._closing = ""
        self._given: list[str] = []  # what was given back while BARE: the reasoning, if a closing tag comes
        self._restart = False  # the next text given back starts the answer again

    @property
    def dropped(self) -> bool:
        """A reasoning block was found (and left out)."""
        return bool(self._closing)

    @property
    def untagged(self) -> bool:
        """Text came and no tag yet told what it is (reasoning of a block the prompt
        opened, or the answer)."""
        return self._state is _State.BARE

    @property
    def unclosed(self) -> bool:
        """The answer ended inside a reasoning block: no answer came."""
        return self._state is _State.THINKING

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
            elif not lead or any(tag.startswith(lead) for tag in _OPENINGS + _CLOSINGS):
                return ""  # whitespace, or the start of a tag not yet whole
            else:
                self._state = _State.BARE
        if self._state is _State.BARE:
            return self._bare(final=False)
        if self._state is _State.THINKING:
            end = self._held.find(self._closing)
            if end < 0:
                # Only what may be the start of the closing tag is worth keeping.
                self._held = self._held[-(len(self._closing) - 1):]
                return ""
            self._state = _State.AFTER
            self._held = self._held[end + len(self._closing):]
        return self._after()

    def end(self) -> str:
        """What is still held once the answer has ended: text that only looked like the
        start of a tag is the answer's; an unclosed block's reasoning is not."""
        if self._state is _State.THINKING:
            self._held = ""
        if self._state is _State.BARE:
            return self._bare(final=True)
        return self._release()

    def _bare(self, *, final: bool) -> str:
        """Text with no opening tag before it: given back as it comes, up to a closing tag
        (or what may be one, held); at a closing tag, decide whether it ends reasoning."""
        held = self._held
        at, tag = _first_closing(held)
        if tag is None:
            cut = len(held) if final else _partial_tag_at(held)
            return self._give(held[:cut], rest=held[cut:])
        before, after = "".join(self._given) + held[:at], held[at + len(tag):]
        line_before = before[before.rfind("\n") + 1:]
        starts_line = not line_before.strip()
        # Written onto the reasoning's last word: a tag the answer speaks of stands apart
        # from the word before it (a space, a quote, a bracket).
        on_a_word = not starts_line and not line_before[-1].isspace() and line_before[-1] not in _APART
        if (starts_line or on_a_word) and _outside_code(before):
            self._state, self._restart, self._closing = _State.AFTER, True, tag
            self._given.clear()
            self._held = after
            return self._after()
        self._state = _State.ANSWER  # a tag the answer speaks of: everything is the answer now
        self._given.clear()
        return self._give(held, rest="")

    def _give(self, text: str, *, rest: str) -> str:
        self._held = rest
        if self._state is _State.BARE and text:
            self._given.append(text)
        return text

    def taken_back(self) -> bool:
        """Whether the text given back so far was reasoning after all (asked after each
        feed: true once, when the closing tag that says so came)."""
        restart, self._restart = self._restart, False
        return restart

    def _after(self) -> str:
        self._held = self._held.lstrip()
        if not self._held:
            return ""
        self._state = _State.ANSWER
        return self._release()

    def _release(self) -> str:
        held, self._held = self._held, ""
        return held


def _first_closing(text: str) -> tuple[int, str | None]:
    """Where the first whole closing tag is in `text`, and which."""
    found = [(text.find(tag), tag) for tag in _CLOSINGS if tag in text]
    return min(found) if found else (-1, None)


def _partial_tag_at(text: str) -> int:
    """Where a closing tag not yet whole may begin at the end of `text` (its length if none)."""
    start = text.rfind("<", max(0, len(text) - len(max(_CLOSINGS, key=len))))
    if start >= 0 and any(tag.startswith(text[start:]) for tag in _CLOSINGS):
        return start
    return len(text)


def _outside_code(before: str) -> bool:
    """No opening tag and no open code block before: a tag after those is spoken of."""
    return not any(tag in before for tag in _OPENINGS) and before.count("```") % 2 == 0


# Models seen writing their reasoning with no opening tag (a bare closing tag came), by
# server and model, in the cache every process shares. Such a model that a limit stops
# before it closes its reasoning sent no answer: what came was reasoning, not an answer
# cut short. Only a model seen so is judged so: an answer from any other has no tag to go by.
#
# What is seen is kept to the chat it was seen in (`reasoner_scope`: a workspace's person,
# or a chat with no one person, such as a group's): a bare closing tag is text any person
# can have the model write ("start your reply with </think>"), and noted for the server and
# model alone it had every other workspace's cut answers on them thrown away as reasoning.
# Nothing else tells the model this note is for: its chat template opened the block in the
# prompt, so no opening tag comes, and a server that sends reasoning apart
# (`reasoning_content`) sends no closing tag either. A real reasoner closes its reasoning
# in every answer, so each chat learns it from its first.
# Calls made for no chat (the doctor's probe, `qorven setup`'s) note and judge nothing.
REASONER_TTL = 30 * 24 * 3600
_NOTE_EVERY = 3600.0  # seconds between this process's writes for one model in one chat
NOTED_KEPT = 10_000  # chats × models this process remembers writing for; past it, it forgets them all
_noted: dict[str, float] = {}
_noted_lock = threading.Lock()
_scope: ContextVar[str] = ContextVar("reasoner_scope", default="")


@contextmanager
def reasoner_scope(*, tenant_id: int, user_id: int | None, session_id: int | None) -> Iterator[None]:
    """Model calls inside note and judge untagged reasoning for this chat alone: the
    person's (`user_id`) in the workspace, or the session's when it has no one person."""
    chat = f"user {user_id}" if user_id is not None else f"session {session_id}" if session_id is not None else ""
    token = _scope.set(f"tenant {tenant_id} {chat}" if chat else "")
    try:
        yield
    finally:
        _scope.reset(token)


def _reasoner_key(route: str) -> str:
    """The cache key for `route` in the current chat; "" outside any chat."""
    scope = _scope.get()
    if not scope:
        return ""
    return "qorven:reasoner:" + hashlib.sha256(f"{scope}\n{route}".encode()).hexdigest()[:32]


def reasoner_note(route: str) -> None:
    """`route` (its server and model) answered the current chat with untagged reasoning
    and a closing tag."""
    key = _reasoner_key(route)
    if not key:
        return
    now = time.monotonic()
    with _noted_lock:
        if now - _noted.get(key, -_NOTE_EVERY) < _NOTE_EVERY:
            return
        if len(_noted) >= NOTED_KEPT:
            _noted.clear()  # the cost of forgetting: one more cache write per chat and model
        _noted[key] = now
    try:
        cache.set(key, 1, REASONER_TTL)
    except Exception:  # the cache down costs only this judgement, never the answer
        logger.warning("could not note that a model writes untagged reasoning", exc_info=True)


def reasoner_known(route: str) -> bool:
    """Whether `route` was seen writing untagged reasoning in the current chat."""
    key = _reasoner_key(route)
    if not key:
        return False
    try:
        return bool(cache.get(key))
    except Exception:
        logger.warning("could not look up whether a model writes untagged reasoning", exc_info=True)
        return False
