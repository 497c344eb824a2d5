"""Reading a streamed chat completion into an answer, as OpenAI-compatible servers really
send it: keep-alives, a time limit, text with broken characters, a reasoning block, tool
calls in fragments, counts that are not counts, a body that ends early."""
from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import openai

from qorven.runtime.storable_text import storable

from .errors import ModelRefused, ProviderUnavailable
from .provider import RESTART, Completion, TokenCallback, Usage
from .thinking import ThinkingFilter, reasoner_known, reasoner_note
from .tool_call_deltas import ToolCallAssembler

if TYPE_CHECKING:
    from openai._streaming import ServerSentEvent

logger = logging.getLogger(__name__)


class AnswerStream(openai.Stream[object]):
    """The SDK's stream of a chat completion, read to the end of the response's body.

    The SDK stops reading at the `[DONE]` event and closes the response; a response closed
    before its body has ended takes its connection with it, so every streamed answer made
    the next model call open a new connection — to a remote provider, a TCP and a TLS
    handshake each time. Nothing but the body's end follows `[DONE]`: it is read, and the
    connection goes back to the client's pool. A server that fails to end the body there
    costs its connection, not the answer (the error of that read is dropped)."""

    # Called after every read of the body, keep-alive comments included (they make no
    # event): the time limit and a Stop are looked at even while the server sends nothing
    # but keep-alives.
    watch: Callable[[], None] | None = None
    finished = False  # the server said the answer is complete ([DONE])
    # The most bytes read while no event comes (0: no bound), then EventTooLong. The SDK
    # reads an event whole, however long, before it yields it: one endless line or chunk
    # would otherwise be held in memory whole before any bound on the answer sees it.
    event_bytes = 0

    def _iter_events(self) -> Iterator[ServerSentEvent]:
        reads = self.response.iter_bytes
        unheard = 0  # bytes read since the last event

        def watched(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            nonlocal unheard
            for data in reads(*args, **kwargs):
                if self.watch is not None:
                    self.watch()
                unheard += len(data)
                if self.event_bytes and unheard > self.event_bytes:
                    raise EventTooLong(unheard)
                yield data

        self.response.iter_bytes = watched  # type: ignore[method-assign]
        events = super()._iter_events()
        for sse in events:
            unheard = 0
            if sse.data.startswith("[DONE]"):
                self.finished = True
                try:
                    for _after in events:
                        pass
                except (openai.APIError, EventTooLong):
                    pass
            yield sse


class EventTooLong(Exception):
    """A server-sent event ran past the most an answer within its bounds could need."""


class RanOn(Exception):
    """Text with no tag to say it was reasoning ran past the bound and on to the time limit."""


# The bytes one event may take for each character of QORVEN_MAX_REPLY_CHARS, and beyond:
# a piece of text and a tool call's arguments each as long as the bound, every character
# written as a JSON escape (six bytes), fit with room to spare.
EVENT_BYTES_PER_CHAR = 16
EVENT_BYTES_SLACK = 64 * 1024


def answer_read(
    stream: AnswerStream, *, model: str, deadline: float, seconds: float, max_chars: int,
    on_token: TokenCallback | None, max_tool_calls: int = 0, route: str = "",
) -> Completion:
    """The answer read from `stream`, its text streamed to `on_token` as it comes: by
    `deadline` (time.monotonic()), a limit of `seconds`; at most `max_chars` of text, and of
    each tool call, and at most `max_tool_calls` calls (0: no bound), then the stream is let
    go and the answer is cut there. Reasoning does not count: text with no tag yet to say
    whether it is reasoning is read on past `max_chars` (none of it kept) until a closing
    tag says it was, or the end or the time limit says it was the answer, cut at
    `max_chars`. `route` names the server and model (what is learned
    of their reasoning is kept under it, for the chat the call is made for:
    qorven.llm.thinking.reasoner_scope). Raises ProviderUnavailable or ModelRefused when what
    came is not an answer."""
    parts: list[str] = []
    calls = ToolCallAssembler(max_chars=max_chars, max_calls=max_tool_calls)
    usage: Usage | None = None
    finish = ""
    text_of = _Mender()
    thoughts = ThinkingFilter()
    heard = time.monotonic()
    room = max_chars or -1  # characters still to take; -1: no bound
    overflow = False  # more text came than there was room for, or a tool call past its bounds
    # Untagged text ran past the bound: the answer cut there, unless a closing tag comes
    # to say it was reasoning, which the bound does not count (read on to see, keeping none of it).
    over = False
    reasoned = False  # reasoning came apart from the answer (`reasoning_content`, OpenRouter's `reasoning`)

    def take(text: str) -> bool:
        """Keep and stream a piece of the answer's text; False when it ran past the bound."""
        nonlocal room, heard, over
        if thoughts.taken_back():
            # What streamed so far was the model's reasoning, its closing tag just came.
            if route:
                reasoner_note(route)
            parts.clear()
            room, over = max_chars or -1, False
            if on_token is not None:
                on_token(RESTART)
        fits = True
        if text and room >= 0:
            fits = len(text) <= room
            text = text[:room]
            room -= len(text)
        if text:
            parts.append(text)
            heard = time.monotonic()
            if on_token is not None:
                on_token(text)
        if not fits and thoughts.untagged:
            over = True
            return True
        return fits

    def watch() -> None:
        if time.monotonic() > deadline:
            if over:  # an answer running on past the bound, as far as can be told: cut there
                raise RanOn()
            raise ProviderUnavailable(f"the model did not finish within {seconds:.0f}s", model=model)
        if on_token is not None and time.monotonic() - heard > IDLE_LOOK:
            on_token("")  # nothing to show yet: the caller may look at its Stop

    stream.watch = watch
    if max_chars:
        stream.event_bytes = max_chars * EVENT_BYTES_PER_CHAR + EVENT_BYTES_SLACK
    chunks = _chunks_of(stream, model)
    while not overflow:
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        except (EventTooLong, RanOn):
            overflow = True  # whatever it held, it ran past the bounds: as for a reply too long
            break
        except ValueError as exc:  # a data line that is not JSON, cut off, or not text
            raise ProviderUnavailable(f"the model server sent an answer we could not read "
                                      f"({type(exc).__name__})", model=model) from exc
        if not isinstance(chunk, dict):
            continue
        model = chunk.get("model") or model
        counted = chunk.get("usage")
        if isinstance(counted, dict):
            usage = _usage(counted)
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            reasoned = reasoned or bool(delta.get("reasoning_content") or delta.get("reasoning"))
            overflow = not take(thoughts.feed(text_of.feed(delta.get("content"))))
            fragments = delta.get("tool_calls")
            for fragment in fragments if isinstance(fragments, list) else []:
                if not calls.feed(fragment):
                    overflow = True
                    break
            if overflow:
                break
    if not overflow:
        # What was held back at the end (half a character, what looked like a tag's start).
        overflow = not take(thoughts.feed(text_of.end())) or not take(thoughts.end())
        if thoughts.unclosed and not calls and finish != "content_filter":
            # It ended inside its reasoning: no answer came, and asking again would spend
            # the same reasoning. As when its length limit ends it there (finish "length").
            finish = "length"
    # It ended with untagged text past the bound and no closing tag: the answer, too long.
    overflow = overflow or over
    if overflow:
        # A reply that would run on and on (a model with no length limit of its own
        # repeating itself, or streaming a tool call's arguments without end): kept to
        # here, said to be cut like one the model's own limit ended; a tool call begun in
        # it is incomplete and not run.
        finish = "length"
    if finish == "length":
        # A limit ended the answer: a tool call begun in it may be cut anywhere (after its
        # name, in its arguments) and is not run, nor any call beside it. Fed back as a
        # failed call, the model would write it again into the same limit.
        calls.clear()
    if finish == "length" and parts and thoughts.untagged and route and reasoner_known(route):
        # A model known to write its reasoning with no opening tag, stopped before its
        # closing tag: no answer came, only reasoning, taken back as its tag would have.
        parts.clear()
        reasoned = True
        if on_token is not None:
            on_token(RESTART)
    content = "".join(parts)
    if not finish and not stream.finished:
        # The body ended before the server said the answer was complete (no finish
        # reason, no [DONE]): a fragment, not the answer.
        raise ProviderUnavailable("the answer stopped before its end", model=model)
    if finish == "content_filter" and not content and not calls:
        raise ModelRefused("the answer was withheld by the provider's content filter", model=model)
    tool_calls = calls.calls(mended)
    if not content.strip() and not tool_calls and not overflow and finish != "length":
        # Nothing to show and nothing to do (an HTML page, a server that ignored
        # `stream`, a stop with no text): a failure to answer, not an answer. Not so when
        # the model's output limit ran out first (a reasoning model that spent it all
        # thinking): asking again spends it the same way; the reply is the cut-off notice.
        raise ProviderUnavailable("the model server sent an empty answer", model=model)
    return Completion(content=content, tool_calls=tool_calls, usage=usage, model=model, cut_off=finish == "length",
                      withheld=finish == "content_filter", reasoned=reasoned or thoughts.dropped)


def _chunks_of(stream: AnswerStream, model: str) -> Iterator[Any]:
    """The answer's chunks: its events, or, from a server that ignored `stream` and
    answered whole (JSON), that answer as one chunk. A web page is no answer: the base
    URL reaches a site (a sign-in page in front of the server, a web interface), not the
    API, and trying again will not change that."""
    kind = stream.response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "text/html":
        raise ModelRefused("the model server answered with a web page (text/html), not a chat completion: "
                           "does the base URL reach the API (often ending in /v1)?", kind="misconfigured", model=model)
    if kind != "application/json":
        return iter(stream)
    try:
        whole = json.loads(stream.response.read())
    except ValueError:
        return iter(stream)  # events after all, labelled JSON (the body read is read again from memory)
    stream.finished = True
    if not isinstance(whole, dict):
        return iter(())
    if whole.get("error") and not whole.get("choices"):
        raise _error_answered(whole["error"], model)
    choices = []
    for choice in whole.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            calls = message.get("tool_calls")
            calls = [{**c, "index": i} for i, c in enumerate(calls) if isinstance(c, dict)] if isinstance(
                calls, list) else []
            choices.append({"delta": {**message, "tool_calls": calls},
                            "finish_reason": choice.get("finish_reason") or "stop"})
    return iter([{"model": whole.get("model"), "usage": whole.get("usage"), "choices": choices}])


def _error_answered(error: Any, model: str) -> ModelRefused | ProviderUnavailable:
    """An error answered with status 200. With an overload's code it is one (try again
    later); otherwise the server does not speak the API at this URL: LM Studio answers
    a path it does not serve (a base URL without /v1) so, and no try will change that."""
    code = error.get("code") if isinstance(error, dict) else None
    detail = f"the model server answered 200 with an error: {str(error)[:500]}"
    if type(code) is int and (code in (408, 409, 429) or 500 <= code <= 599):
        return ProviderUnavailable(detail, status=code, model=model)
    return ModelRefused(detail, kind="misconfigured", model=model)


# More tokens than any model's context holds: a count past it is the server's mistake.
TOKENS_BELIEVED = 100_000_000


def _usage(counted: dict[str, Any]) -> Usage | None:
    """The server's token count, or None (then it is estimated) when it is not one: a
    negative, absurd or non-numeric count would fail the usage table's write after the
    answer came, or skew the tenant's budget."""
    prompt, completion = counted.get("prompt_tokens") or 0, counted.get("completion_tokens") or 0
    if not all(type(n) is int and 0 <= n <= TOKENS_BELIEVED for n in (prompt, completion)):
        logger.info("model server's usage count ignored (not a count of tokens): %.200r", counted)
        return None
    return Usage(prompt, completion)


IDLE_LOOK = 0.5  # seconds without a token after which a read of the body lets the caller look at its Stop


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


class _Mender:
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
