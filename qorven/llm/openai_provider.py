"""Any OpenAI-compatible server through the official `openai` SDK.

Synchronous, on one long-lived `openai.OpenAI` client per (base URL, key, timeout,
retries): its HTTP connection pool is reused by every call on every worker thread (a
streamed answer is read to the end of its body, so its connection goes back to the pool:
`_Stream`), and nothing builds an event loop, a thread or a client per call. The client of
a route stored in the database connects only where the address policy allows
(qorven.runtime.outbound_transport); one refused there fails as a refused route.
"""
from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletion

from qorven.runtime.outbound import address_refusal
from qorven.runtime.route_slots import SlotTimeout, route_slot
from qorven.runtime.storable_text import storable

from .errors import ContextLengthExceeded, ModelError, ModelRefused, ProviderUnavailable
from .provider import Completion, TokenCallback, Usage
from .thinking import ThinkingFilter
from .tool_call_deltas import ToolCallAssembler

if TYPE_CHECKING:
    from openai._streaming import ServerSentEvent

logger = logging.getLogger(__name__)

_CONTEXT_MARKERS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens",
                    "context size", "exceed_context_size")  # the last two: llama.cpp's server
_QUOTA_CODES = ("insufficient_quota", "billing_hard_limit_reached")

# The routes used last, each with its client (and its pool of open connections). Every
# fallback whose key or URL was edited, every tenant gone, left a client behind for the
# life of the process, its connections open; past CLIENTS_KEPT the least recently used
# goes, and closes once the calls still holding it end (the SDK closes it when collected).
CLIENTS_KEPT = 64
_clients: OrderedDict[tuple[str, str, float, int, bool], openai.OpenAI] = OrderedDict()
_clients_lock = threading.Lock()


def client_for(*, base_url: str, api_key: str, timeout: float, max_retries: int,
               guarded: bool = False) -> openai.OpenAI:
    """The process's one client for this route. `guarded`: the base URL came from the
    database, and every connection the client makes (a redirect's included) keeps to the
    address policy with the address it resolved (qorven.runtime.outbound_transport)."""
    key = (base_url, api_key, timeout, max_retries, guarded)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = openai.OpenAI(
                base_url=base_url or None, api_key=api_key or "not-needed", timeout=timeout,
                max_retries=max_retries, http_client=_guarded_http_client() if guarded else None,
            )
            while len(_clients) > CLIENTS_KEPT:
                _clients.popitem(last=False)
        else:
            _clients.move_to_end(key)
    return client


def _guarded_http_client() -> openai.DefaultHttpxClient:
    from qorven.runtime.outbound_transport import guarded_transport

    # The SDK's own client and defaults (redirects followed, its limits), on a guarded transport.
    return openai.DefaultHttpxClient(transport=guarded_transport(limits=openai.DEFAULT_CONNECTION_LIMITS))


def _refused_route(exc: openai.APIError, model: str) -> ModelRefused | None:
    """A connection the address policy refused, as the route the check before use refuses."""
    refusal = address_refusal(exc)
    if refusal is None:
        return None
    return ModelRefused(f"model route refused: {refusal}", kind="misconfigured", model=model)


class _Stream(openai.Stream[object]):
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

    def _iter_events(self) -> Iterator[ServerSentEvent]:
        reads = self.response.iter_bytes

        def watched(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            for data in reads(*args, **kwargs):
                if self.watch is not None:
                    self.watch()
                yield data

        self.response.iter_bytes = watched  # type: ignore[method-assign]
        events = super()._iter_events()
        for sse in events:
            if sse.data.startswith("[DONE]"):
                self.finished = True
                try:
                    for _after in events:
                        pass
                except openai.APIError:
                    pass
            yield sse


class OpenAIProvider:
    """Streams a chat completion. Transient failures (429, 5xx, timeouts, connection
    errors) are retried by the SDK with backoff, honouring Retry-After; streaming stops at
    `deadline` seconds. Every failure comes out as one of qorven.llm.errors."""

    def __init__(
        self, *, base_url: str, api_key: str, model: str, timeout: float, max_retries: int, deadline: float,
        max_concurrency: int = 0, max_chars: int = 0, guarded: bool = False,
    ) -> None:
        self.model = model
        self._max_chars = max_chars  # the longest reply read (0: no bound), then the stream is let go
        self.base_url = base_url
        self._timeout = timeout
        self._deadline = deadline
        self._retries = max_retries
        self._cap = max_concurrency
        # Retried here, not by the SDK: its retries (each with the full timeout) knew
        # nothing of the call's time limit.
        self._client = client_for(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, guarded=guarded)

    def complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        try:
            # A call past the server's cap waits its turn, at most as long as a call may run.
            with route_slot(base_url=self.base_url, cap=self._cap, wait=self._deadline,
                            lease=self._deadline + self._timeout):
                return self._complete(messages=messages, tools=tools, on_token=on_token)
        except SlotTimeout as exc:
            raise ProviderUnavailable(f"every slot of the model server stayed busy: {exc}", kind="rate_limited",
                                      model=self.model) from None
        except ModelError as exc:
            exc.host = urlsplit(self.base_url).netloc  # for the owners' notice: which server failed
            raise

    def _complete(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> Completion:
        """The call, and up to `max_retries` more when it fails transiently before any of
        the answer came (Retry-After honoured), all within the time limit."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
        deadline = time.monotonic() + self._deadline
        for attempt in range(self._retries + 1):
            answering = False
            try:
                # The SDK's documented low-level call rather than `chat.completions.create`:
                # the body is already the API's JSON, and create()'s request transform walks
                # every message of the prompt through its type hints (~40 % of a turn's CPU
                # with a full prompt). Auth, errors and the stream parser are the SDK's own;
                # each chunk comes as the API's JSON (a dict): building a typed chunk object
                # for every token cost more than the rest of reading the stream.
                left = max(deadline - time.monotonic(), 0.001)
                with self._client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                       options={"timeout": min(self._timeout, left)},
                                       stream=True, stream_cls=_Stream) as stream:
                    answering = True
                    return self._collect(stream, on_token, deadline)
            except ModelError as exc:
                failure = exc
            except openai.APIStatusError as exc:
                failure = _classify(exc, self.model)
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                refused = _refused_route(exc, self.model)
                if refused is not None:
                    raise refused from None
                failure = ProviderUnavailable(f"could not reach the model server: {exc}", model=self.model)
                failure.dropped = not isinstance(exc, openai.APITimeoutError)
            except openai.APIError as exc:  # an error event in the middle of a stream
                failure = ProviderUnavailable(f"the model server failed mid-answer: {exc}", model=self.model)
            wait = _retry_wait(attempt, failure.retry_after)
            if (answering or not failure.transient or attempt == self._retries or wait is None
                    or time.monotonic() + wait >= deadline):
                raise failure
            logger.info("model call to %s failed (%s); trying again in %.1fs", self.model, failure.summary(), wait)
            time.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _collect(self, stream: Any, on_token: TokenCallback | None, deadline: float) -> Completion:
        parts: list[str] = []
        calls = ToolCallAssembler()
        usage: Usage | None = None
        model = self.model
        finish = ""
        text_of = _Mender()
        thoughts = ThinkingFilter()
        heard = time.monotonic()
        room = self._max_chars or -1  # characters still to take; -1: no bound
        overflow = False  # more text came than there was room for

        def watch() -> None:
            if time.monotonic() > deadline:
                raise ProviderUnavailable(f"the model did not finish within {self._deadline:.0f}s", model=model)
            if on_token is not None and time.monotonic() - heard > IDLE_LOOK:
                on_token("")  # nothing to show yet: the caller may look at its Stop

        stream.watch = watch
        chunks = iter(stream)
        while not overflow:
            try:
                chunk = next(chunks)
            except StopIteration:
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
                text = thoughts.feed(text_of.feed(delta.get("content")))
                if text and room >= 0:
                    overflow = len(text) > room
                    text = text[:room]
                    room -= len(text)
                if text:
                    parts.append(text)
                    heard = time.monotonic()
                    if on_token is not None:
                        on_token(text)
                fragments = delta.get("tool_calls")
                for fragment in fragments if isinstance(fragments, list) else []:
                    calls.feed(fragment)
        if not overflow:
            # What was held back at the end (half a character, what looked like a tag's start).
            tail = thoughts.feed(text_of.end()) + thoughts.end()
            if tail and room >= 0:
                overflow = len(tail) > room
                tail = tail[:room]
            if tail:
                parts.append(tail)
                if on_token is not None:
                    on_token(tail)
        if overflow:
            # A reply that would run on and on (a model with no length limit of its own
            # repeating itself): kept to here, said to be cut like one the model's own
            # limit ended; a tool call begun in it is incomplete and not run.
            finish, calls = "length", ToolCallAssembler()
        content = "".join(parts)
        if not finish and not stream.finished:
            # The body ended before the server said the answer was complete (no finish
            # reason, no [DONE]): a fragment, not the answer.
            raise ProviderUnavailable("the answer stopped before its end", model=model)
        if finish == "content_filter" and not content and not calls:
            raise ModelRefused("the answer was withheld by the provider's content filter", model=model)
        tool_calls = calls.calls(mended)
        if not content.strip() and not tool_calls:
            # Nothing to show and nothing to do (an HTML page, a server that ignored
            # `stream`, a stop with no text): a failure to answer, not an answer.
            raise ProviderUnavailable("the model server sent an empty answer", model=model)
        return Completion(content=content, tool_calls=tool_calls, usage=usage, model=model, cut_off=finish == "length")


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


def _retry_wait(attempt: int, retry_after: float | None) -> float | None:
    """Seconds before trying again after `attempt` (0 is the first) failed: the server's
    Retry-After up to a minute (None past it: not worth waiting in the call), else 0.5 s
    doubling to 8 s, with some jitter."""
    if retry_after is not None:
        return retry_after if retry_after <= 60 else None
    return min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())


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


_AUDIO_NAMES = {"audio/ogg": "voice.ogg", "audio/mpeg": "voice.mp3", "audio/mp4": "voice.m4a", "audio/wav": "voice.wav",
                "audio/webm": "voice.webm", "audio/aac": "voice.aac", "audio/amr": "voice.amr"}


def transcription_create(
    *, base_url: str, api_key: str, model: str, audio: bytes, mime_type: str, timeout: float, max_retries: int,
    guarded: bool = False,
) -> str:
    """One transcription (OpenAI's /audio/transcriptions, which OpenAI-compatible speech
    servers mirror) on the route's shared client. Failures come out as qorven.llm.errors."""
    client = client_for(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                        guarded=guarded)
    name = _AUDIO_NAMES.get(mime_type.split(";")[0].strip(), "voice.ogg")
    try:
        result = client.audio.transcriptions.create(model=model, file=(name, audio, mime_type))
    except openai.APIStatusError as exc:
        raise _classify(exc, model) from None
    except (openai.APITimeoutError, openai.APIConnectionError) as exc:
        raise _refused_route(exc, model) or ProviderUnavailable(f"{type(exc).__name__}: {exc}", model=model) from None
    text = getattr(result, "text", None)
    return text.strip() if isinstance(text, str) else str(result).strip()


def _classify(exc: openai.APIStatusError, model: str) -> ModelError:
    status = exc.status_code
    code = str(getattr(exc, "code", "") or "")
    detail = f"{status}: {exc.message}"
    if status == 429 and code not in _QUOTA_CODES:
        return ProviderUnavailable(detail, kind="rate_limited", status=status, model=model,
                                   retry_after=_retry_after(exc))
    if status >= 500 or status in (408, 409):
        return ProviderUnavailable(detail, status=status, model=model, retry_after=_retry_after(exc))
    if status == 400 and _is_context_error(exc):
        return ContextLengthExceeded(detail, status=status, model=model)
    if status in (402, 429):
        return ModelRefused(detail, kind="quota", status=status, model=model)
    if status in (401, 403, 404):
        return ModelRefused(detail, kind="misconfigured", status=status, model=model)
    return ModelRefused(detail, status=status, model=model)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers if exc.response is not None else {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(float(value) * scale, 0.0)
            except ValueError:
                continue
    return None


def _is_context_error(exc: openai.APIStatusError) -> bool:
    text = f"{getattr(exc, 'code', '') or ''} {exc.message}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)
